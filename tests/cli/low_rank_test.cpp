// `unillm train` with GaLore (use_galore) and APOLLO (use_apollo, layerwise) on the bundled
// stories260K: the loss decreases, a resume across a projection refresh is exact, and
// LLaMA-Factory's refusals reach the command line.
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

// The optimiser tests' pt run (pt_run_util.h), full fine-tuning with weight decay.
std::string write_config(const std::string& dir, const std::string& name, const std::string& extra) {
  return testing::pt_config(dir, name, "finetuning_type: full\nlearning_rate: 5.0e-3\nweight_decay: 0.01\n" + extra);
}

// Uninterrupted run a (the loss falls); run b killed after step 7 and resumed from checkpoint-6
// (the projection refreshes at step 8): the same losses and the same final weights.
void expect_exact_resume(const std::string& dir, const std::string& extra) {
  testing::expect_exact_resume(dir, "finetuning_type: full\nlearning_rate: 5.0e-3\nweight_decay: 0.01\n" + extra);
  testing::expect_loss_decreases(dir + "/a", dir);
}

TEST(LowRankTrain, GaloreTrainsAndResumesExactly) {
  const std::string dir = testing::temp_dir("galore_train");
  expect_exact_resume(dir,
                      "use_galore: true\ngalore_target: all\ngalore_rank: 8\n"
                      "galore_update_interval: 4\ngalore_scale: 1.0\n");
  // Its checkpoint cannot be resumed by plain AdamW: the optimiser switch is named.
  const auto other = run_unillm("train " + write_config(dir, "b", "") +
                                " resume_from_checkpoint=" + dir + "/b/checkpoint-6 --quiet");
  EXPECT_EQ(other.exit_code, 1) << other.err;
  EXPECT_NE(other.err.find("galore"), std::string::npos) << other.err;
}

TEST(LowRankTrain, ApolloLayerwiseTrainsAndResumesExactly) {
  const std::string dir = testing::temp_dir("apollo_train");
  const std::string extra =
      "use_apollo: true\napollo_layerwise: true\napollo_rank: 8\napollo_update_interval: 4\n"
      "apollo_scale: 1.0\napollo_scale_type: channel\n";
  expect_exact_resume(dir, extra);
  // The start says what layerwise means here.
  const auto r = run_unillm("train " + write_config(dir, "c", extra) + " max_steps=1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE((r.err + r.out).find("apollo_layerwise: unillm keeps one gradient arena"),
            std::string::npos)
      << r.err;
}

TEST(LowRankTrain, LlamaFactoryRefusalsReachTheCommandLine) {
  const std::string dir = testing::temp_dir("low_rank_bad");
  const auto lora =
      run_unillm("train " + write_config(dir, "x", "use_galore: true\n") + " finetuning_type=lora");
  EXPECT_EQ(lora.exit_code, 1);
  EXPECT_NE(lora.err.find("Cannot use LoRA with GaLore, APOLLO or BAdam together."),
            std::string::npos)
      << lora.err;
  const auto none =
      run_unillm("train " + write_config(dir, "y", "use_galore: true\ngalore_target: attn_qkv\n"));
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_NE(none.err.find("galore_target 'attn_qkv' matches no trainable linear weight"),
            std::string::npos)
      << none.err;
}

}  // namespace
}  // namespace unillm
