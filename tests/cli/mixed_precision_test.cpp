// `bf16: true` / `fp16: true` end to end on the bundled model: losses track the f32 run within 1%
// (but are not identical: the saved activations really are rounded) for full, freeze and LoRA
// fine-tuning; an interrupted mixed-precision run resumes exactly (fp16's loss scale included);
// both keys at once are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "support/expect.h"
#include "support/run_cli.h"
#include "train_log_util.h"

namespace unillm {
namespace {

namespace fs = std::filesystem;
using testing::log_lines;
using testing::train_losses;
using testing::run_unillm;
using testing::source_path;

std::string write_config(const std::string& dir, const std::string& name, const std::string& extra) {
  std::string path = dir + "/" + name + ".yaml";
  std::ofstream(path) << "model_name_or_path: " << source_path("assets/stories260K") << "\n"
                      << "stage: pt\ndo_train: true\n"
                      << "dataset: tinyshakespeare\ndataset_dir: " << source_path("data") << "\n"
                      << "cutoff_len: 64\nmax_samples: 400\n"
                      << "output_dir: " << dir << "/" << name << "\n"
                      << "per_device_train_batch_size: 4\ngradient_accumulation_steps: 2\n"
                      << "learning_rate: 2.0e-3\nlr_scheduler_type: cosine\nwarmup_steps: 2\n"
                      << "max_steps: 16\nlogging_steps: 1\nsave_steps: 8\nseed: 11\n"
                      << extra;
  return path;
}

void train(const std::string& cfg, const std::string& args = "") {
  auto r = run_unillm("train " + cfg + " --quiet " + args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
}

// Each step's loss within 1% of the f32 run's, and at least one step different.
void expect_tracks(const std::vector<double>& f32, const std::vector<double>& low, const std::string& what) {
  ASSERT_EQ(f32.size(), 16u) << what;
  ASSERT_EQ(low.size(), f32.size()) << what;
  bool differs = false;
  for (size_t i = 0; i < f32.size(); ++i) {
    EXPECT_LE(std::fabs(low[i] - f32[i]), 0.01 * f32[i]) << what << " step " << i + 1;
    differs |= low[i] != f32[i];
  }
  EXPECT_TRUE(differs) << what << ": every loss equals the f32 run's; were activations rounded at all?";
  EXPECT_LT(low.back(), low.front()) << what << ": did not learn";
}

TEST(MixedPrecision, LossesTrackF32ForFullFreezeAndLora) {
  const std::string dir = testing::temp_dir("mixed");
  for (const std::string type : {"full", "freeze", "lora"}) {
    std::string extra = "finetuning_type: " + type + "\n";
    if (type == "freeze") extra += "freeze_trainable_layers: 2\n";
    const std::string lr = type == "lora" ? "learning_rate=1.0e-2" : "";
    train(write_config(dir, type + "_f32", extra), lr);
    train(write_config(dir, type + "_bf16", extra + "bf16: true\n"), lr);
    expect_tracks(train_losses(dir + "/" + type + "_f32"), train_losses(dir + "/" + type + "_bf16"), type + " bf16");
    if (type == "full") {
      train(write_config(dir, "full_fp16", extra + "fp16: true\n"));
      expect_tracks(train_losses(dir + "/full_f32"), train_losses(dir + "/full_fp16"), "full fp16");
    }
  }
  // The trained model generates (a mixed-dtype freeze output loads back).
  auto g = run_unillm("generate --model " + dir + "/freeze_bf16 --prompt 'Once' --max-new-tokens 4 --temperature 0");
  EXPECT_EQ(g.exit_code, 0) << g.err;
}

TEST(MixedPrecision, InterruptedRunsResumeExactly) {
  const std::string dir = testing::temp_dir("mixed_resume");
  for (const std::string key : {"bf16", "fp16"}) {
    const std::string extra = "finetuning_type: full\n" + key + ": true\n";
    train(write_config(dir, key + "_a", extra));
    const std::string cfg = write_config(dir, key + "_b", extra);
    auto killed = run_unillm("train " + cfg + " --quiet --kill-after-step 8");
    ASSERT_EQ(killed.exit_code, 128 + 9) << killed.err;
    train(cfg, "resume_from_checkpoint=true");
    auto a = log_lines(dir + "/" + key + "_a"), b = log_lines(dir + "/" + key + "_b");
    ASSERT_EQ(a.size(), 16u);
    ASSERT_EQ(b.size(), 16u);
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i]["loss"], b[i]["loss"]) << key << " step " << i + 1;
      EXPECT_EQ(a[i]["grad_norm"], b[i]["grad_norm"]) << key << " step " << i + 1;
    }
    EXPECT_EQ(testing::slurp(dir + "/" + key + "_a/model.safetensors"), testing::slurp(dir + "/" + key + "_b/model.safetensors"))
        << key;
  }
  auto state = nlohmann::json::parse(testing::slurp(dir + "/fp16_b/checkpoint-8/trainer_state.json"));
  EXPECT_EQ(state["unillm"]["loss_scale"].get<double>(), 65536.0);  // no overflow in 8 steps
}

TEST(MixedPrecision, Bf16AndFp16TogetherAreRefused) {
  const std::string dir = testing::temp_dir("mixed_both");
  auto r = run_unillm("train " + write_config(dir, "both", "finetuning_type: full\nbf16: true\nfp16: true\n"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("bf16 and fp16"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace unillm
