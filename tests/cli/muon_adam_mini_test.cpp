// `unillm train` with use_muon and use_adam_mini on the bundled stories260K: the loss decreases,
// a resume is exact (their state comes back from the checkpoint), a resume that switches the
// optimiser is refused, and Adam-mini's refusal of LoRA q/k matrices it cannot cut per head.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "support/expect.h"
#include "support/run_cli.h"
#include "pt_run_util.h"
#include "train_log_util.h"

namespace unillm {
namespace {

namespace fs = std::filesystem;
using testing::run_unillm;
using testing::source_path;

// The optimiser tests' pt run (pt_run_util.h) with weight decay, so that its handling is covered.
std::string write_config(const std::string& dir, const std::string& name, const std::string& extra) {
  return testing::pt_config(dir, name, "weight_decay: 0.01\n" + extra);
}


// Trains `extra` (the loss falls) and checks a kill -9 / resume continues it exactly.
void expect_exact_resume(const std::string& dir, const std::string& extra) {
  testing::expect_exact_resume(dir, "weight_decay: 0.01\n" + extra);
  testing::expect_loss_decreases(dir + "/a", dir);
}

TEST(MuonAdamMini, MuonTrainsAndResumesExactly) {
  const std::string dir = testing::temp_dir("muon_resume");
  expect_exact_resume(dir, "finetuning_type: full\nuse_muon: true\nlearning_rate: 5.0e-3\n");
  // Its checkpoint holds Muon's state: resuming it with plain AdamW is refused, naming both.
  const auto other = run_unillm("train " + write_config(dir, "b", "finetuning_type: full\n") +
                                " resume_from_checkpoint=" + dir + "/b/checkpoint-6 --quiet");
  EXPECT_EQ(other.exit_code, 1) << other.err;
  EXPECT_NE(other.err.find("muon"), std::string::npos) << other.err;
  EXPECT_NE(other.err.find("adamw"), std::string::npos) << other.err;
}

TEST(MuonAdamMini, AdamMiniTrainsAndResumesExactly) {
  const std::string dir = testing::temp_dir("adam_mini_resume");
  expect_exact_resume(dir, "finetuning_type: full\nuse_adam_mini: true\nlearning_rate: 5.0e-3\n");
}

TEST(MuonAdamMini, LoraRunsWithMuonAndAdamMiniRefusesUncuttableHeads) {
  const std::string dir = testing::temp_dir("muon_lora");
  const std::string lora =
      "finetuning_type: lora\nlora_target: all\nlora_rank: 4\nlearning_rate: 5.0e-3\n";
  const auto r =
      run_unillm("train " + write_config(dir, "muon", lora + "use_muon: true\n") + " --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  testing::expect_loss_decreases(dir + "/muon", "muon lora");
  // stories260K: dim 64, 8 heads → 512-element head blocks; q_proj's lora_A [4, 64] has 256.
  const auto m = run_unillm("train " + write_config(dir, "mini", lora + "use_adam_mini: true\n"));
  EXPECT_EQ(m.exit_code, 1) << m.err;
  EXPECT_NE(m.err.find("q_proj.lora_A"), std::string::npos) << m.err;
  EXPECT_NE(m.err.find("per head"), std::string::npos) << m.err;
}

// On a device (the reference plugin) both loop on the host over copies of the arena: the same
// run as on the CPU.
TEST(MuonAdamMini, HostLoopsRunForADeviceArena) {
  const std::string dir = testing::temp_dir("muon_dev");
  for (const char* key : {"use_muon", "use_adam_mini"}) {
    const std::string cfg = write_config(
        dir, key, std::string("finetuning_type: full\nlearning_rate: 1.0e-3\n") + key + ": true\n");
    auto run = [&cfg, &dir, key](const std::string& device) {
      return testing::run_shell("UNILLM_PLUGIN_PATH=" +
                                testing::shell_quote(std::string(UNILLM_BINARY_DIR) + "/plugins") +
                                " " + std::string(UNILLM_BINARY_DIR) + "/unillm train " + cfg +
                                " output_dir=" + dir + "/" + key + "_" + device +
                                " max_steps=3 --quiet --device " + device +
                                " --device-fallback error </dev/null");
    };
    const auto cpu = run("cpu"), ref = run("ref");
    ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
    ASSERT_EQ(ref.exit_code, 0) << ref.err;
    const auto a = testing::train_losses(dir + "/" + key + "_cpu");
    const auto b = testing::train_losses(dir + "/" + key + "_ref");
    ASSERT_EQ(a.size(), 3u);
    ASSERT_EQ(b.size(), 3u);
    // Muon's bf16 rounding can turn the device's last-bit gradient differences into bf16 ones:
    // a step of the 4-decimal logged loss.
    const double tol = std::string(key) == "use_muon" ? 5e-5 : 1e-5;
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_NEAR(a[i], b[i], tol * a[i]) << key << " step " << i + 1;
  }
}

}  // namespace
}  // namespace unillm
