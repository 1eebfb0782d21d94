// `unillm train` with stage kto end to end: LLaMA-Factory's llama3_lora_kto.yaml (paths and
// template changed: examples/train_lora/stories260K_lora_kto.yaml) on the bundled kto_en_demo:
// step 1 is 0.5 with zero rewards and KL (the fresh adapter's policy is the reference), KTO's
// figures are logged as LLaMA-Factory logs them, the loss falls, and a kill -9 resumes exactly.
#include <gtest/gtest.h>

#include <filesystem>

#include "support/expect.h"
#include "support/run_cli.h"
#include "train_log_util.h"

namespace unillm {
namespace {

namespace fs = std::filesystem;
using testing::log_lines;
using testing::train_lines;
using testing::run_unillm_in;
using testing::slurp;
using testing::source_path;

const char* kExample = "train examples/train_lora/stories260K_lora_kto.yaml";
const char* kShort =
    " bf16=false cutoff_len=96 max_samples=40 val_size=0.2 per_device_train_batch_size=4 gradient_accumulation_steps=1"
    " learning_rate=5.0e-3 warmup_ratio=0 max_steps=8 logging_steps=1 save_steps=4 eval_strategy=steps"
    " eval_steps=4 per_device_eval_batch_size=4 --quiet";

TEST(Kto, LlamaFactoryExampleTrainsLogsAndResumesExactly) {
  const std::string dir = testing::temp_dir("kto");
  auto a = run_unillm_in(source_path(""), std::string(kExample) + " output_dir=" + dir + "/a" + kShort);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const auto lines = train_lines(dir + "/a");
  ASSERT_EQ(lines.size(), 8u);
  EXPECT_EQ(lines[0]["loss"].get<double>(), 0.5);
  EXPECT_EQ(lines[0]["kl"].get<double>(), 0.0);
  // A split's figures are logged when the interval held an example of it (LLaMA-Factory's rule).
  for (const char* k : {"rewards/chosen", "rewards/rejected", "rewards/margins", "logps/chosen", "logps/rejected",
                        "logits/chosen", "logits/rejected"}) {
    bool seen = false;
    for (const auto& j : lines) seen = seen || j.contains(k);
    EXPECT_TRUE(seen) << k;
  }
  if (lines[0].contains("rewards/chosen")) {
    EXPECT_EQ(lines[0]["rewards/chosen"].get<double>(), 0.0);
  }
  bool eval_seen = false;
  for (auto& j : log_lines(dir + "/a"))
    if (j.contains("eval_loss")) eval_seen = j.contains("eval_kl");
  EXPECT_TRUE(eval_seen);
  EXPECT_TRUE(fs::exists(dir + "/a/training_rewards_chosen.png"));
  auto killed = run_unillm_in(source_path(""), std::string(kExample) + " output_dir=" + dir + "/b" + kShort +
                                                   " --kill-after-step 4");
  EXPECT_EQ(killed.exit_code, 128 + 9) << killed.err;
  auto resumed = run_unillm_in(source_path(""), std::string(kExample) + " output_dir=" + dir + "/b" + kShort +
                                                    " resume_from_checkpoint=true");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  const auto again = train_lines(dir + "/b");
  ASSERT_EQ(again.size(), 8u);
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(again[i]["loss"], lines[i]["loss"]) << "step " << i + 1;
    EXPECT_EQ(again[i]["grad_norm"], lines[i]["grad_norm"]) << "step " << i + 1;
  }
  EXPECT_EQ(slurp(dir + "/a/adapter_model.safetensors"), slurp(dir + "/b/adapter_model.safetensors"));
}

TEST(Kto, DataWithoutATagIsAClearError) {
  const std::string dir = testing::temp_dir("kto_bad");
  auto r = run_unillm_in(source_path(""), std::string(kExample) + " output_dir=" + dir +
                                              "/out max_steps=1 dataset=alpaca_en_demo --quiet");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("kto_tag"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace unillm
