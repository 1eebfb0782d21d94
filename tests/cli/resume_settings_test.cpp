// Resuming with settings other than the checkpoint's: refused for what exact resume needs (every
// differing key named at once), a warning for the hyper-parameters a user may change on purpose.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "support/expect.h"
#include "support/run_cli.h"

namespace unillm {
namespace {

namespace fs = std::filesystem;
using testing::run_unillm;
using testing::source_path;

std::string lora_config(const std::string& dir) {
  const std::string path = dir + "/cfg.yaml";
  std::ofstream(path) << "model_name_or_path: " << source_path("assets/stories260K")
                      << "\nstage: pt\nfinetuning_type: lora\nlora_rank: 8\ndo_train: true\n"
                      << "dataset: tinyshakespeare\ndataset_dir: " << source_path("data") << "\n"
                      << "cutoff_len: 32\nmax_samples: 200\nper_device_train_batch_size: 4\n"
                      << "max_steps: 8\nsave_steps: 4\nlogging_steps: 1\nlearning_rate: 1.0e-3\n"
                      << "output_dir: " << dir << "/out\n";
  return path;
}

TEST(ResumeSettings, ChangedShapeOrDataSettingsAreRefused) {
  const std::string dir = testing::temp_dir("resumeset");
  const std::string cfg = lora_config(dir);
  auto first = run_unillm("train " + cfg + " --quiet --kill-after-step 4");
  ASSERT_EQ(first.exit_code, 128 + 9) << first.err;
  ASSERT_TRUE(fs::exists(dir + "/out/checkpoint-4/trainer_state.json"));
  auto rank = run_unillm("train " + cfg + " resume_from_checkpoint=true lora_rank=4 --quiet");
  EXPECT_EQ(rank.exit_code, 1) << rank.err;
  EXPECT_NE(rank.err.find("lora_rank: 8 -> 4"), std::string::npos) << rank.err;
  EXPECT_NE(rank.err.find("lora_alpha: 16.0 -> 8.0"), std::string::npos) << rank.err;
  auto two = run_unillm("train " + cfg + " resume_from_checkpoint=true per_device_train_batch_size=2 seed=3");
  EXPECT_EQ(two.exit_code, 1) << two.err;
  EXPECT_NE(two.err.find("per_device_train_batch_size: 4 -> 2"), std::string::npos) << two.err;
  EXPECT_NE(two.err.find("seed: 42 -> 3"), std::string::npos) << two.err;
  EXPECT_FALSE(fs::exists(dir + "/out/checkpoint-8"));
  // A new learning rate is the user's choice: a warning names it and the run goes on.
  auto lr = run_unillm("train " + cfg + " resume_from_checkpoint=true learning_rate=5.0e-4 --quiet");
  EXPECT_EQ(lr.exit_code, 0) << lr.err;
  EXPECT_NE(lr.err.find("learning_rate: 0.001 -> 0.0005"), std::string::npos) << lr.err;
}

}  // namespace
}  // namespace unillm
