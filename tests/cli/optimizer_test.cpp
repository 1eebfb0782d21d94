// `unillm train` with each optimiser (optim: sgd / adafactor / adamw_8bit, adafactor: true) and
// LoRA+ on the bundled stories260K: the loss decreases, an adafactor resume is exact, and a resume
// with another optimiser or an unknown optim name is a clear error.
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



TEST(Optimizers, EachTrainsStories260K) {
  const std::string dir = testing::temp_dir("optims");
  const std::pair<const char*, const char*> runs[] = {
      {"sgd", "finetuning_type: full\noptim: sgd\nlearning_rate: 0.5\nweight_decay: 0.01\n"},
      {"adafactor",
       "finetuning_type: full\noptim: adafactor\nlearning_rate: 1.0e-3\nweight_decay: 0.01\n"},
      {"adafactor_flag",
       "finetuning_type: full\nadafactor: true\nlearning_rate: 1.0e-3\nweight_decay: 0.01\n"},
      {"adamw_8bit",
       "finetuning_type: full\noptim: adamw_bnb_8bit\nlearning_rate: 5.0e-3\nweight_decay: 0.01\n"},
      {"loraplus",
       "finetuning_type: lora\nlora_target: all\nlora_rank: 4\nlearning_rate: 5.0e-3\n"
       "loraplus_lr_ratio: 8\n"},
      {"lora", "finetuning_type: lora\nlora_target: all\nlora_rank: 4\nlearning_rate: 5.0e-3\n"},
  };
  std::string log_8bit;
  for (const auto& [name, extra] : runs) {
    const auto r = run_unillm("train " + testing::pt_config(dir, name, extra));
    ASSERT_EQ(r.exit_code, 0) << name << ": " << r.err;
    testing::expect_loss_decreases(dir + "/" + name, name);
    if (std::string(name) == "adamw_8bit") log_8bit = r.err + r.out;
  }
  // adafactor: true is optim adafactor (HF's deprecated key), step for step.
  EXPECT_EQ(testing::train_losses(dir + "/adafactor"),
            testing::train_losses(dir + "/adafactor_flag"));
  // LoRA+ moves B faster than plain LoRA: the runs part after the first step.
  EXPECT_NE(testing::train_losses(dir + "/lora")[2], testing::train_losses(dir + "/loraplus")[2]);
  // The memory plan sizes the 8-bit state (2 bytes per element + scales: 0.5 MiB here, not 2).
  EXPECT_NE(log_8bit.find("optimizer state"), std::string::npos) << log_8bit;
}

TEST(Optimizers, AdafactorResumeIsExact) {
  const std::string dir = testing::temp_dir("adafactor_resume");
  const std::string extra =
      "finetuning_type: full\noptim: adafactor\nlearning_rate: 1.0e-3\nweight_decay: 0.01\n";
  testing::expect_exact_resume(dir, extra);
  // Resuming its checkpoint with another optimiser is refused, naming both.
  const auto other =
      run_unillm("train " + testing::pt_config(dir, "b", "finetuning_type: full\noptim: sgd\n") +
                 " resume_from_checkpoint=" + dir + "/b/checkpoint-6 --quiet");
  EXPECT_EQ(other.exit_code, 1) << other.err;
  EXPECT_NE(other.err.find("optim"), std::string::npos) << other.err;
  EXPECT_NE(other.err.find("adafactor"), std::string::npos) << other.err;
}

// On a device (the reference plugin, no host fallback for its ops) the host-side optimisers copy
// the arena over and back each step: the same run as on the CPU.
TEST(Optimizers, HostLoopsRunForADeviceArena) {
  const std::string dir = testing::temp_dir("optim_dev");
  const std::string cfg =
      testing::pt_config(dir, "dev", "finetuning_type: full\noptim: adamw_8bit\nlearning_rate: 1.0e-3\n");
  auto run = [&cfg, &dir](const std::string& device) {
    return testing::run_shell(
        "UNILLM_PLUGIN_PATH=" + testing::shell_quote(std::string(UNILLM_BINARY_DIR) + "/plugins") +
        " " + std::string(UNILLM_BINARY_DIR) + "/unillm train " + cfg + " output_dir=" + dir + "/" +
        device + " max_steps=4 --quiet --device " + device + " --device-fallback error </dev/null");
  };
  const auto cpu = run("cpu"), ref = run("ref");
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  const auto a = testing::train_losses(dir + "/cpu"), b = testing::train_losses(dir + "/ref");
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5 * a[i]) << "step " << i + 1;
}

TEST(Optimizers, UnknownOptimIsRefusedListingTheImplementedOnes) {
  const std::string dir = testing::temp_dir("optim_bad");
  const auto r =
      run_unillm("train " + testing::pt_config(dir, "x", "finetuning_type: full\noptim: lion_8bit\n"));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("lion_8bit"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("adafactor"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace unillm
