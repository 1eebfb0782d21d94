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

// HF's own GaLore (optim galore_adamw with optim_target_modules and optim_args) is galore_torch's
// GaLoreAdamW with the settings transformers 4.46 gives it: the learning rate only (betas
// 0.9/0.999, eps 1e-6, no weight decay even with weight_decay set). So it must train exactly as
// LLaMA-Factory's GaLore keys with those settings, whether the targets are a list of names or one
// regex string; its own errors reach the command line.
TEST(LowRankTrain, HfGaloreOptimIsGaloreWithTransformersSettings) {
  const std::string dir = testing::temp_dir("hf_galore");
  const std::string base = "finetuning_type: full\nlearning_rate: 5.0e-3\n", steps = " max_steps=6 save_steps=100";
  auto losses = [&](const std::string& name, const std::string& extra) {
    const auto r = run_unillm("train " + testing::pt_config(dir, name, base + extra) + steps + " --quiet");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return testing::train_losses(dir + "/" + name);
  };
  const auto lf = losses("lf", "weight_decay: 0.0\nadam_epsilon: 1.0e-6\nuse_galore: true\ngalore_target: q_proj,v_proj\n"
                               "galore_rank: 4\ngalore_update_interval: 2\ngalore_scale: 0.25\n");
  ASSERT_EQ(lf.size(), 6u);
  const std::string hf = "weight_decay: 0.01\noptim: galore_adamw\noptim_args: rank=4, update_proj_gap=2, scale=0.25\n";
  EXPECT_EQ(losses("list", hf + "optim_target_modules: [q_proj, v_proj]\n"), lf);
  EXPECT_EQ(losses("regex", hf + "optim_target_modules: '.*self_attn\\.(q|v)_proj'\n"), lf);
  // Other targets, another run.
  EXPECT_NE(losses("all", hf + "optim_target_modules: all-linear\n"), lf);
  auto refused = [&](const std::string& name, const std::string& extra, const std::string& want) {
    const auto r = run_unillm("train " + testing::pt_config(dir, name, base + extra));
    EXPECT_EQ(r.exit_code, 1) << name;
    EXPECT_NE(r.err.find(want), std::string::npos) << r.err;
  };
  refused("no_targets", "optim: galore_adamw\n", "optim galore_adamw needs optim_target_modules");
  refused("bad_args", "optim: galore_adamw\noptim_target_modules: [q_proj]\noptim_args: rank\n",
          "optim_args 'rank': 'rank' is not key=value");
  refused("bad_regex", "optim: galore_adamw\noptim_target_modules: 'q_proj('\n", "is not a valid regular expression");
  refused("both", "optim: galore_adamw\noptim_target_modules: [q_proj]\nuse_galore: true\n",
          "use_galore with optim galore_adamw");
  refused("none", "optim: galore_adamw\noptim_target_modules: [attn_qkv]\n", "matches no trainable linear weight");
}

}  // namespace
}  // namespace unillm
