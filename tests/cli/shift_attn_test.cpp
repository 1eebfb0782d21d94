// shift_attn (LongLoRA's S²-Attn) from the CLI: training forwards of every stage attend within
// shifted groups, evaluation attends fully, the preference stages' references follow
// LLaMA-Factory's rule, and what it does not cover is refused. Its arithmetic is checked against the published algorithm in
// tests/reference/shift_attn_check.py.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "pt_run_util.h"
#include "run_compare_util.h"

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

// The preference stages (their examples): the policy's training forwards attend in shifted groups,
// and the reference follows LLaMA-Factory's rule — the policy with its adapters off (LoRA) attends
// as the policy does (PEFT's disable_adapter() leaves the patched model in training mode), a frozen
// copy (full fine-tuning) attends fully (loaded for inference, without the shift). Step 1's figures
// pin it: with LoRA the policy equals its reference (loss ln 2, rewards 0 for DPO; rewards and KL 0
// for KTO) while its log-probs differ from a run without shift_attn; with full fine-tuning the
// policy's log-probs are the LoRA run's and the rewards are β × (shifted − full-attention log-probs).
TEST(ShiftAttn, PreferenceStagesFollowLlamaFactorysReferenceRule) {
  const std::string dir = testing::temp_dir("shift_attn_pref");
  auto step1 = [&](const std::string& name, const std::string& args) {
    const auto r = testing::train_processes(
        1, "examples/train_lora/stories260K_lora_" + args +
               " max_steps=1 logging_steps=1 save_strategy=no max_samples=8 per_device_train_batch_size=2"
               " bf16=false --quiet output_dir=" + dir + "/" + name);
    EXPECT_EQ(r.exit_code, 0) << name << "\n" << r.err;
    const auto log = testing::log_lines(dir + "/" + name);
    return log.empty() ? nlohmann::json::object() : log.front();
  };
  const auto lora = step1("dpo_lora", "dpo.yaml shift_attn=true");
  const auto plain = step1("dpo_plain", "dpo.yaml");
  const auto full = step1("dpo_full", "dpo.yaml shift_attn=true finetuning_type=full");
  ASSERT_TRUE(lora.contains("logps/chosen") && plain.contains("logps/chosen") && full.contains("logps/chosen"));
  EXPECT_NEAR(lora["loss"].get<double>(), std::log(2.0), 1e-4);
  EXPECT_EQ(lora["rewards/chosen"].get<double>(), 0.0);
  EXPECT_EQ(lora["rewards/rejected"].get<double>(), 0.0);
  const double s2 = lora["logps/chosen"].get<double>(), fa = plain["logps/chosen"].get<double>();
  EXPECT_GT(std::abs(s2 - fa), 1e-3 * std::abs(fa));  // the shift is on
  EXPECT_NEAR(full["logps/chosen"].get<double>(), s2, 1e-6 * std::abs(s2));
  const double want = 0.1 * (s2 - fa);  // pref_beta 0.1
  EXPECT_NEAR(full["rewards/chosen"].get<double>(), want, 1e-4 * std::abs(want));
  // KTO: its target and KL rows run apart, each padded to its own multiple of 8.
  const auto kto = step1("kto_lora", "kto.yaml shift_attn=true");
  const auto kto_plain = step1("kto_plain", "kto.yaml");
  ASSERT_TRUE(kto.contains("kl") && kto_plain.contains("logps/chosen"));
  EXPECT_EQ(kto["kl"].get<double>(), 0.0);
  EXPECT_EQ(kto["rewards/chosen"].get<double>(), 0.0);
  EXPECT_NE(kto["logps/chosen"].get<double>(), kto_plain["logps/chosen"].get<double>());
  // The reward model scores the shifted forward's last hidden states.
  const auto rm = step1("rm_s2", "reward.yaml shift_attn=true learning_rate=0");
  const auto rm_plain = step1("rm_plain", "reward.yaml learning_rate=0");
  ASSERT_TRUE(rm.contains("loss") && rm_plain.contains("loss"));
  EXPECT_NE(rm["loss"].get<double>(), rm_plain["loss"].get<double>());
}

// Under tensor parallelism each process attends its own heads — stories260K's 8 over 2 processes:
// process 0 the unshifted half, process 1 the shifted one (tests/nn/shift_attention_test.cpp cuts
// blocks across the halves) — and the run is one process's: losses as logged, gradient norms within
// 1e-5, with and without sequence parallelism, full and LoRA.
TEST(ShiftAttn, TensorParallelismGivesOneProcessesRun) {
  const std::string dir = testing::temp_dir("shift_attn_tp");
  for (const auto& [name, extra] : std::vector<std::pair<std::string, std::string>>{
           {"full", " finetuning_type=full"}, {"lora_sp", " sequence_parallel=true"}}) {
    testing::expect_layout_is_one_process(
        dir, name, "examples/train_lora/stories260K_lora_sft.yaml shift_attn=true learning_rate=1e-3" + extra,
        " tensor_parallel_degree=2", 1e-5);
  }
}

// Where it is not built, and what cannot be, are refused with the reason, with every other problem
// of the config.
TEST(ShiftAttn, RefusedWhereNotImplemented) {
  const std::string dir = testing::temp_dir("shift_attn_refused");
  const auto dpo = run_unillm("train " + pt_config(dir, "dpo", "shift_attn: true\nref_mode: precompute\n") +
                              " stage=dpo dataset=dpo_en_demo template=alpaca finetuning_type=lora");
  EXPECT_EQ(dpo.exit_code, 1);
  EXPECT_NE(dpo.err.find("shift_attn with ref_mode precompute under LoRA"), std::string::npos) << dpo.err;
  const auto bad = run_unillm("train " + pt_config(dir, "bad", "shift_attn: maybe\n"));
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("shift_attn"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace unillm
