// The same commands on the reference plugin device (`--device ref`, with the host fallback
// refused, so every op ran on the device's own kernels): generate and eval ppl give the CPU's
// tokens and perplexity, train (full and LoRA) the CPU's losses within 1e-5 relative and weights within 2e-4; device
// names, indices, plugins that fail and a refused fallback are clear errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "io/safetensors.h"
#include "support/expect.h"
#include "support/run_cli.h"
#include "run_compare_util.h"
#include "train_log_util.h"

namespace unillm {
namespace {

namespace fs = std::filesystem;
using testing::shell_quote;
using testing::slurp;
using testing::source_path;

// unillm with the reference plugin on UNILLM_PLUGIN_PATH (plus extra entries).
testing::CliResult run_with_plugins(const std::string& args, const std::string& extra_path = "") {
  const std::string path = std::string(UNILLM_BINARY_DIR) + "/plugins" + extra_path;
  return testing::run_shell("UNILLM_PLUGIN_PATH=" + shell_quote(path) + " " +
                            std::string(UNILLM_BINARY_DIR) + "/unillm " + args + " </dev/null");
}

const std::string kModel = source_path("assets/stories260K");
const std::string kNoFallback = " --device-fallback error";

using testing::max_weight_diff;
using testing::number_after;

TEST(Device, GenerateAndEvalOnTheReferenceDevice) {
  const std::string gen = "generate --model " + kModel +
                          " --prompt-ids 1,400,60 --max-new-tokens 12 --temperature 0 --output-ids --quiet";
  auto cpu = run_with_plugins(gen);
  auto ref = run_with_plugins(gen + " --device ref:1" + kNoFallback);
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  EXPECT_EQ(ref.out, cpu.out);  // the greedy tokens
  EXPECT_EQ(ref.err.find("no kernel"), std::string::npos) << ref.err;
  const std::string ppl = "eval ppl --model " + kModel + " --file " + kModel + "/llama2c_sample.txt";
  auto p_cpu = run_with_plugins(ppl), p_ref = run_with_plugins(ppl + " --device ref" + kNoFallback);
  ASSERT_EQ(p_ref.exit_code, 0) << p_ref.err;
  const double a = number_after(p_cpu.out, "ppl="), b = number_after(p_ref.out, "ppl=");
  EXPECT_LE(std::abs(a - b), 1e-5 * a) << p_cpu.out << p_ref.out;
}

std::string config(const std::string& dir, const std::string& type) {
  const std::string path = dir + "/cfg.yaml";
  std::ofstream(path) << "model_name_or_path: " << kModel << "\nstage: pt\ndo_train: true\n"
                      << "finetuning_type: " << type << "\ndataset: tinyshakespeare\ndataset_dir: "
                      << source_path("data") << "\ncutoff_len: 64\nmax_samples: 200\n"
                      << "per_device_train_batch_size: 4\nmax_steps: 20\nlogging_steps: 1\n"
                      << "save_steps: 10\nlearning_rate: 1.0e-3\nseed: 7\n";
  return path;
}

TEST(Device, TrainingOnTheReferenceDeviceMatchesTheCpu) {
  for (const char* type : {"full", "lora"}) {
    const std::string dir = testing::temp_dir(std::string("devtrain-") + type);
    const std::string cfg = config(dir, type);
    auto cpu = run_with_plugins("train " + cfg + " output_dir=" + dir + "/cpu --quiet");
    auto ref = run_with_plugins("train " + cfg + " output_dir=" + dir + "/ref --quiet --device ref" + kNoFallback);
    ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
    ASSERT_EQ(ref.exit_code, 0) << ref.err;
    const auto a = testing::log_lines(dir + "/cpu"), b = testing::log_lines(dir + "/ref");
    ASSERT_EQ(a.size(), 20u);
    ASSERT_EQ(b.size(), 20u);
    for (size_t i = 0; i < a.size(); ++i) {
      const double la = a[i]["loss"].get<double>(), lb = b[i]["loss"].get<double>();
      EXPECT_LE(std::abs(la - lb), 1e-5 * std::abs(la)) << type << " step " << i + 1;
    }
    const std::string weights = std::string(type) == "lora" ? "/adapter_model.safetensors" : "/model.safetensors";
    // Weights agree less tightly than losses: AdamW's step m / sqrt(v) magnifies last-bit
    // differences of gradients where v is tiny (measured 5.6e-5 after 20 full steps).
    EXPECT_LE(max_weight_diff(dir + "/ref" + weights, dir + "/cpu" + weights), 2e-4) << type;
    // The checkpoint written from the device resumes on the CPU and ends where both ended.
    auto resumed = run_with_plugins("train " + cfg + " output_dir=" + dir + "/ref resume_from_checkpoint=" +
                                    dir + "/ref/checkpoint-10 --quiet");
    ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
    EXPECT_LE(max_weight_diff(dir + "/ref" + weights, dir + "/cpu" + weights), 2e-4) << type;
  }
}

TEST(Device, DeviceErrors) {
  const std::string gen = "generate --model " + kModel + " --prompt-ids 1 --max-new-tokens 2 --quiet";
  auto unknown = run_with_plugins(gen + " --device npu");
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_NE(unknown.err.find("unknown device 'npu' (registered: cpu, ref"), std::string::npos) << unknown.err;
  auto index = run_with_plugins(gen + " --device ref:7");
  EXPECT_EQ(index.exit_code, 1);
  EXPECT_NE(index.err.find("'ref:7' does not exist: ref has 2 devices"), std::string::npos) << index.err;
  auto bad = run_with_plugins(gen + " --device future",
                              ":" + std::string(UNILLM_BINARY_DIR) + "/test_plugins/libunillm_bad_plugin_1.so");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("built for plugin ABI 2.0"), std::string::npos) << bad.err;
  // ref_partial is the reference plugin without its rms_norm kernel.
  const std::string partial = ":" + std::string(UNILLM_BINARY_DIR) + "/tests/plugins";
  auto refused = run_with_plugins(gen + " --device ref_partial" + kNoFallback, partial);
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_NE(refused.err.find("[rms_norm] no kernel on ref_partial:0"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("--device-fallback is error"), std::string::npos) << refused.err;
  auto warned = run_with_plugins(gen + " --device ref_partial", partial);
  EXPECT_EQ(warned.exit_code, 0) << warned.err;
  EXPECT_NE(warned.err.find("[rms_norm] no kernel on ref_partial"), std::string::npos) << warned.err;
  auto policy = run_with_plugins(gen + " --device-fallback maybe");
  EXPECT_EQ(policy.exit_code, 1);
  EXPECT_NE(policy.err.find("--device-fallback must be warn or error"), std::string::npos) << policy.err;
}

}  // namespace
}  // namespace unillm
