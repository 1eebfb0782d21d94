// shift_attn (LongLoRA's S²-Attn) from the CLI: training forwards of pt and sft attend within
// shifted groups, evaluation attends fully, and the stages and layouts it does not cover are
// refused. Its arithmetic is checked against the published algorithm in
// tests/reference/shift_attn_check.py.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "pt_run_util.h"

namespace unillm {
namespace {

using testing::pt_config;
using testing::run_unillm;
using testing::train_losses;

std::vector<double> eval_losses(const std::string& out) {
  std::vector<double> v;
  for (const auto& l : testing::log_lines(out))
    if (l.contains("eval_loss")) v.push_back(l["eval_loss"].get<double>());
  return v;
}

// At learning rate 0 the weights never move: every training loss changes with S²-Attn (a token
// sees only its group), every evaluation loss stays the full-attention one.
TEST(ShiftAttn, TrainingForwardsAttendInGroupsEvaluationAttendsFully) {
  const std::string dir = testing::temp_dir("shift_attn");
  const std::string still = "finetuning_type: full\nlearning_rate: 0\nval_size: 0.1\neval_strategy: steps\neval_steps: 3\n";
  for (const std::string stage : {"pt", "sft"}) {
    const std::string flags =
        stage == "pt" ? " max_steps=3 --quiet"
                      : " stage=sft dataset=alpaca_en_demo template=alpaca cutoff_len=256 max_steps=3 --quiet";
    const auto plain = run_unillm("train " + pt_config(dir, stage + "_plain", still) + flags);
    ASSERT_EQ(plain.exit_code, 0) << plain.err;
    const auto s2 = run_unillm("train " + pt_config(dir, stage + "_s2", still + "shift_attn: true\n") + flags);
    ASSERT_EQ(s2.exit_code, 0) << s2.err;
    EXPECT_NE(s2.err.find("shift_attn: S²-Attn"), std::string::npos) << s2.err;
    const auto lp = train_losses(dir + "/" + stage + "_plain"), ls = train_losses(dir + "/" + stage + "_s2");
    ASSERT_EQ(lp.size(), 3u) << stage;
    ASSERT_EQ(ls.size(), 3u) << stage;
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_NE(lp[i], ls[i]) << stage << " step " << i + 1;
      EXPECT_TRUE(std::isfinite(ls[i])) << stage;
    }
    const auto ep = eval_losses(dir + "/" + stage + "_plain"), es = eval_losses(dir + "/" + stage + "_s2");
    ASSERT_EQ(ep.size(), 1u) << stage;
    EXPECT_EQ(ep, es) << stage;
  }
}

// It trains: the loss of 12 full fine-tuning steps falls as without it.
TEST(ShiftAttn, TrainsWithLoraAndRecompute) {
  const std::string dir = testing::temp_dir("shift_attn_learn");
  const auto r = run_unillm("train " + pt_config(dir, "lora", "finetuning_type: lora\nlora_rank: 8\nlearning_rate: 0.01\n"
                                                              "shift_attn: true\n") + " --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  testing::expect_loss_decreases(dir + "/lora", "S²-Attn LoRA");
}

// Preference stages and tensor parallelism are refused with the reason, with every other problem
// of the config.
TEST(ShiftAttn, RefusedWhereNotImplemented) {
  const std::string dir = testing::temp_dir("shift_attn_refused");
  const auto dpo = run_unillm("train " + pt_config(dir, "dpo", "shift_attn: true\n") +
                              " stage=dpo dataset=dpo_en_demo template=alpaca");
  EXPECT_EQ(dpo.exit_code, 1);
  EXPECT_NE(dpo.err.find("shift_attn (S²-Attn) is implemented for stages pt and sft, not dpo"), std::string::npos)
      << dpo.err;
  const auto tp = run_unillm("train " + pt_config(dir, "tp", "shift_attn: true\ntensor_parallel_degree: 2\n"));
  EXPECT_NE(tp.exit_code, 0);
  EXPECT_NE(tp.err.find("shift_attn under tensor parallelism is not implemented"), std::string::npos) << tp.err;
  const auto bad = run_unillm("train " + pt_config(dir, "bad", "shift_attn: maybe\n"));
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("shift_attn"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace unillm
