// Data parallelism on a plugin device (docs/devices.md, "Collectives"): `mpirun -np 2 unillm train
// --device ref` runs the gradients' allreduce through the reference plugin's collectives table,
// `--device ref_v0` (the same plugin reporting ABI 1.0, no table) through host MPI with device
// tensors staged through host memory, `--device cpu` on the host; the start line names which,
// and all three give the same losses, gradient norms and adapter weights.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "io/safetensors.h"
#include "support/expect.h"
#include "run_compare_util.h"
#include "support/run_cli.h"
#include "train_log_util.h"

namespace unillm {
namespace {

using testing::source_path;

const std::string kPlugins = std::string(UNILLM_BINARY_DIR) + "/plugins:" + UNILLM_BINARY_DIR +
                             "/tests/plugins/libunillm_ref_v0.so";
const std::string kRun =
    " examples/train_lora/stories260K_lora_sft.yaml max_steps=2 logging_steps=1"
    " max_samples=16 per_device_train_batch_size=2 cutoff_len=64 eval_strategy=no val_size=0"
    " plot_loss=false save_steps=1000 --quiet --device-fallback error";

testing::CliResult train_dp2(const std::string& device, const std::string& out) {
  return testing::run_shell(
      "cd " + source_path("") + " && UNILLM_PLUGIN_PATH=" + kPlugins +
      " OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader"
      " timeout -k 5 240 mpirun --oversubscribe --bind-to none -np 2 " +
      UNILLM_BINARY_DIR + "/unillm train" + kRun + " output_dir=" + out + " --device " + device +
      " </dev/null");
}

// The largest |a − b| / (1 + |b|) over the adapter tensors of two runs.
double max_adapter_diff(const std::string& a_dir, const std::string& b_dir) {
  return testing::max_weight_diff(a_dir + "/adapter_model.safetensors", b_dir + "/adapter_model.safetensors");
}

// Losses (as logged) equal and gradient norms within rel, line by line.
void expect_same_steps(const std::string& a_dir, const std::string& b_dir, double rel,
                       const std::string& what) {
  const auto a = testing::train_lines(a_dir), b = testing::train_lines(b_dir);
  ASSERT_EQ(a.size(), 2u) << what;
  ASSERT_EQ(b.size(), 2u) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(a[i]["loss"].get<double>(), b[i]["loss"].get<double>(), 1e-4)
        << what << " step " << i + 1;
    const double ga = a[i]["grad_norm"].get<double>(), gb = b[i]["grad_norm"].get<double>();
    EXPECT_NEAR(ga, gb, rel * std::abs(gb)) << what << " step " << i + 1;
  }
}

TEST(PluginCollectives, DeviceCollectivesHostStagingAndCpuTrainAlike) {
  const std::string dir = testing::temp_dir("plugin_collectives");
  auto ref = train_dp2("ref", dir + "/ref");
  ASSERT_EQ(ref.exit_code, 0) << ref.out << ref.err;
  EXPECT_NE(ref.err.find("[train] collectives: ref's\n"), std::string::npos) << ref.err;
  auto v0 = train_dp2("ref_v0", dir + "/ref_v0");
  ASSERT_EQ(v0.exit_code, 0) << v0.out << v0.err;
  EXPECT_NE(
      v0.err.find("[train] collectives: host MPI, device tensors staged through host memory\n"),
      std::string::npos)
      << v0.err;
  auto cpu = train_dp2("cpu", dir + "/cpu");
  ASSERT_EQ(cpu.exit_code, 0) << cpu.out << cpu.err;
  EXPECT_NE(cpu.err.find("[train] collectives: host MPI\n"), std::string::npos) << cpu.err;
  // The same device kernels and the same two-rank sums: the two collective paths agree exactly.
  expect_same_steps(dir + "/ref", dir + "/ref_v0", 1e-12, "ref vs ref_v0");
  EXPECT_EQ(max_adapter_diff(dir + "/ref", dir + "/ref_v0"), 0.0);
  // Against the CPU, as tests/cli/device_test.cpp bounds one process on ref.
  expect_same_steps(dir + "/ref", dir + "/cpu", 1e-6, "ref vs cpu");
  EXPECT_LT(max_adapter_diff(dir + "/ref", dir + "/cpu"), 2e-4);
}

}  // namespace
}  // namespace unillm
