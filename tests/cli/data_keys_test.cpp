// Hugging Face TrainingArguments that steer the data and the evaluations: data_seed (the shuffle's
// seed, default seed), eval_delay (no periodic evaluation before that step or epoch),
// ignore_data_skip (a resume restarts its epoch's batches) and the deprecated per_gpu_* batch
// sizes. Full fine-tuning of the pretrained stories260K has no other randomness, so the losses
// show which batches a run saw.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <tuple>
#include <nlohmann/json.hpp>

#include "pt_run_util.h"

namespace unillm {
namespace {

using testing::pt_config;
using testing::run_unillm;
using testing::train_losses;

std::vector<double> losses_of(const std::string& dir, const std::string& name, const std::string& extra,
                              const std::string& flags = "") {
  const auto r = run_unillm("train " + pt_config(dir, name, "finetuning_type: full\n" + extra) + flags + " --quiet");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return train_losses(dir + "/" + name);
}

// The batch order follows data_seed, not seed: seed 9 with data_seed 3 repeats seed 3's run loss
// for loss; data_seed 7 gives another first batch.
TEST(DataKeys, DataSeedOrdersTheBatches) {
  const std::string dir = testing::temp_dir("dataseed");
  const auto base = losses_of(dir, "base", "");  // seed: 3
  const auto same = losses_of(dir, "same", "data_seed: 3\n", " seed=9");
  const auto other = losses_of(dir, "other", "data_seed: 7\n");
  ASSERT_EQ(base.size(), 12u);
  EXPECT_EQ(same, base);
  ASSERT_EQ(other.size(), 12u);
  EXPECT_NE(other[0], base[0]);
}

// eval_steps 2 with eval_delay 7: evaluations at steps 8, 10 and 12 only (HF: eval_delay <= step).
TEST(DataKeys, EvalDelayPostponesThePeriodicEvaluations) {
  const std::string dir = testing::temp_dir("evaldelay");
  losses_of(dir, "run", "val_size: 0.1\neval_strategy: steps\neval_steps: 2\neval_delay: 7\n");
  std::vector<int> steps;
  for (const auto& l : testing::log_lines(dir + "/run"))
    if (l.contains("eval_loss")) steps.push_back(l["eval_step"].get<int>());
  EXPECT_EQ(steps, (std::vector<int>{8, 10, 12}));
  const auto bad = run_unillm("train " + pt_config(dir, "bad", "eval_delay: -1\n") + " --quiet");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("eval_delay"), std::string::npos) << bad.err;
}

// At learning rate 0 the weights never move, so a step's loss names its batch. Killed after step
// 7 and resumed from checkpoint-6 with ignore_data_skip, steps 7-12 see the epoch's batches 1-6
// again (losses 1-6 of the straight run); without it they go on with batches 7-12.
TEST(DataKeys, IgnoreDataSkipRestartsTheEpochOnResume) {
  const std::string dir = testing::temp_dir("dataskip");
  const std::string still = "learning_rate: 0\n";
  const auto straight = losses_of(dir, "straight", still);
  ASSERT_EQ(straight.size(), 12u);
  ASSERT_NE(straight[0], straight[6]);
  const std::string cfg = pt_config(dir, "b", "finetuning_type: full\n" + still);
  const auto killed = run_unillm("train " + cfg + " --quiet --kill-after-step 7");
  ASSERT_EQ(killed.exit_code, 128 + 9) << killed.err;
  const auto resumed = run_unillm("train " + cfg + " resume_from_checkpoint=true ignore_data_skip=true");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("ignore_data_skip: epoch 0's batches from its first, not its 7th"), std::string::npos)
      << resumed.err;
  const auto b = train_losses(dir + "/b");
  ASSERT_EQ(b.size(), 12u);  // 6 before the checkpoint (step 7 was lost with the kill), 6 after
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(b[i], straight[i]) << "step " << i + 1;
    EXPECT_EQ(b[6 + i], straight[i]) << "resumed step " << 7 + i;
  }
}

// per_gpu_train_batch_size (deprecated in transformers) wins over per_device_train_batch_size,
// with a warning: 2 rows a step give another loss than pt_config's 4.
TEST(DataKeys, PerGpuBatchSizeIsTheDeprecatedSpelling) {
  const std::string dir = testing::temp_dir("pergpu");
  const auto four = losses_of(dir, "four", "", " max_steps=1");
  const auto r = run_unillm("train " + pt_config(dir, "two", "finetuning_type: full\nper_gpu_train_batch_size: 2\n") + " max_steps=1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("per_gpu_train_batch_size is deprecated"), std::string::npos) << r.err;
  const auto two = train_losses(dir + "/two");
  ASSERT_EQ(two.size(), 1u);
  ASSERT_EQ(four.size(), 1u);
  EXPECT_NE(two[0], four[0]);
}

// NEFTune: noise in the training forwards only. At learning rate 0 the training losses move and
// the evaluation losses do not; with learning, a run killed and resumed continues exactly (the
// noise's seed comes from the checkpointed RNG).
TEST(DataKeys, NeftuneNoisesTrainingForwardsOnlyAndResumesExactly) {
  const std::string dir = testing::temp_dir("neftune");
  const std::string still = "learning_rate: 0\nval_size: 0.1\neval_strategy: steps\neval_steps: 4\n";
  losses_of(dir, "plain", still, " max_steps=4");
  losses_of(dir, "noisy", still + "neftune_noise_alpha: 5\n", " max_steps=4");
  auto evals = [&](const std::string& name, const char* key) {
    std::vector<double> v;
    for (const auto& l : testing::log_lines(dir + "/" + name))
      if (l.contains(key)) v.push_back(l[key].get<double>());
    return v;
  };
  const auto pl = evals("plain", "loss"), nl = evals("noisy", "loss");
  ASSERT_EQ(pl.size(), 4u);
  ASSERT_EQ(nl.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_NE(pl[i], nl[i]) << "step " << i + 1;
  ASSERT_EQ(evals("plain", "eval_loss").size(), 1u);
  EXPECT_EQ(evals("plain", "eval_loss"), evals("noisy", "eval_loss"));
  testing::expect_exact_resume(testing::temp_dir("neftune_resume"), "finetuning_type: full\nneftune_noise_alpha: 5\n");
  const auto dpo = run_unillm("train " + pt_config(dir, "dpo", "neftune_noise_alpha: 5\n") + " stage=dpo");
  EXPECT_NE(dpo.exit_code, 0);
  EXPECT_NE(dpo.err.find("neftune_noise_alpha with stage dpo is not implemented"), std::string::npos) << dpo.err;
}

// lr_scheduler_kwargs reach the run: the logged learning rates of warmup_stable_decay (warm-up 2,
// decay 4, stable the 6 steps left) and of cosine with num_cycles 1 (down and up again). Step s
// logs the next step's rate, as HF (the multiplier at s).
TEST(DataKeys, SchedulerKwargsShapeTheLoggedLearningRates) {
  const std::string dir = testing::temp_dir("sched_kwargs");
  auto lrs = [&](const std::string& name, const std::string& flags) {  // pt_config says constant
    const auto r = run_unillm("train " + pt_config(dir, name, "finetuning_type: full\nlearning_rate: 1.0e-3\n") + flags +
                              " --quiet");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::vector<double> v;
    for (const auto& l : testing::log_lines(dir + "/" + name))
      if (l.contains("lr")) v.push_back(l["lr"].get<double>());
    return v;
  };
  const auto wsd = lrs("wsd", " lr_scheduler_type=warmup_stable_decay warmup_steps=2"
                              " lr_scheduler_kwargs.num_decay_steps=4 lr_scheduler_kwargs.decay_type=linear");
  ASSERT_EQ(wsd.size(), 12u);
  const std::vector<double> want = {0.5, 1, 1, 1, 1, 1, 1, 1, 0.75, 0.5, 0.25, 0};
  for (size_t i = 0; i < 12; ++i) EXPECT_NEAR(wsd[i], 1e-3 * want[i], 1e-15) << "step " << i + 1;
  const auto cyc = lrs("cycles", " lr_scheduler_type=cosine lr_scheduler_kwargs.num_cycles=1.0");
  ASSERT_EQ(cyc.size(), 12u);
  EXPECT_NEAR(cyc[5], 0.0, 1e-15);    // the trough at half the run
  EXPECT_NEAR(cyc[11], 1e-3, 1e-15);  // and back up
  const auto bad = run_unillm("train " + pt_config(dir, "bad", "") + " lr_scheduler_type=warmup_stable_decay --quiet");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("warmup_stable_decay needs lr_scheduler_kwargs num_decay_steps"), std::string::npos) << bad.err;
}

// reduce_lr_on_plateau: at learning rate 2 the evaluation loss rises, so with patience 0 each
// evaluation that does not improve halves the rate (the log shows it from the next step); a run
// killed after step 7 and resumed from checkpoint-6 continues with the reduced rate exactly.
TEST(DataKeys, ReduceLrOnPlateauFollowsTheEvaluations) {
  const std::string dir = testing::temp_dir("plateau");
  const std::string flags = " lr_scheduler_type=reduce_lr_on_plateau lr_scheduler_kwargs.patience=0"
                            " lr_scheduler_kwargs.factor=0.5 eval_strategy=steps eval_steps=1 val_size=0.1 --quiet";
  const std::string cfg = pt_config(dir, "a", "finetuning_type: full\nlearning_rate: 2.0\n");
  const auto a = run_unillm("train " + cfg + flags);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  std::vector<double> lrs, evals;
  for (const auto& l : testing::log_lines(dir + "/a")) {
    if (l.contains("lr")) lrs.push_back(l["lr"].get<double>());
    if (l.contains("eval_loss")) evals.push_back(l["eval_loss"].get<double>());
  }
  ASSERT_EQ(lrs.size(), 12u);
  ASSERT_EQ(evals.size(), 12u);
  double lr = 2.0, best = INFINITY;
  int reductions = 0;
  for (size_t i = 0; i < 12; ++i) {
    EXPECT_DOUBLE_EQ(lrs[i], lr) << "step " << i + 1;  // logged before this step's evaluation
    if (evals[i] < best * (1 - 1e-4)) {
      best = evals[i];
    } else {
      lr *= 0.5;
      ++reductions;
    }
  }
  EXPECT_GE(reductions, 2) << "the evaluation losses never stalled: the test shows nothing";
  const std::string cfg_b = pt_config(dir, "b", "finetuning_type: full\nlearning_rate: 2.0\n");
  EXPECT_EQ(run_unillm("train " + cfg_b + flags + " --kill-after-step 7").exit_code, 128 + 9);
  const auto resumed = run_unillm("train " + cfg_b + flags + " resume_from_checkpoint=true");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_EQ(testing::train_losses(dir + "/a"), testing::train_losses(dir + "/b"));
  const auto no_eval = run_unillm("train " + pt_config(dir, "c", "") + " lr_scheduler_type=reduce_lr_on_plateau --quiet");
  EXPECT_EQ(no_eval.exit_code, 1);
  EXPECT_NE(no_eval.err.find("reduce_lr_on_plateau requires an eval strategy"), std::string::npos) << no_eval.err;
}

// group_by_length: packed pt rows all have one length, so the order (and every loss) is the plain
// run's; SFT rows differ in length, so batches change; a resume may not switch it.
TEST(DataKeys, GroupByLengthRegroupsOnlyRowsOfDifferentLengths) {
  const std::string dir = testing::temp_dir("bylength");
  EXPECT_EQ(losses_of(dir, "pt_grouped", "group_by_length: true\n"), losses_of(dir, "pt_plain", ""));
  const std::string sft = " stage=sft dataset=alpaca_en_demo template=alpaca cutoff_len=512 max_steps=3";
  const auto plain = losses_of(dir, "sft_plain", "", sft), grouped = losses_of(dir, "sft_grouped", "group_by_length: true\n", sft);
  ASSERT_EQ(plain.size(), 3u);
  ASSERT_EQ(grouped.size(), 3u);
  EXPECT_NE(plain, grouped);
  const std::string cfg = pt_config(dir, "resume", "finetuning_type: full\n");
  ASSERT_EQ(run_unillm("train " + cfg + " --quiet --kill-after-step 7").exit_code, 128 + 9);
  const auto changed = run_unillm("train " + cfg + " resume_from_checkpoint=true group_by_length=true");
  EXPECT_EQ(changed.exit_code, 1);
  EXPECT_NE(changed.err.find("group_by_length: false -> true"), std::string::npos) << changed.err;
}

// transformers 5's train_sampling_strategy: group_by_length is group_by_length's run, sequential
// disable_shuffling's (LLaMA-Factory's sequential sampler), random the default; a config saying
// both ways must agree (every contradiction reported).
TEST(DataKeys, TrainSamplingStrategyIsTheSamplerKeysOfTransformersFive) {
  const std::string dir = testing::temp_dir("sampling");
  const std::string sft = " stage=sft dataset=alpaca_en_demo template=alpaca cutoff_len=512 max_steps=3";
  const auto grouped = losses_of(dir, "grouped", "group_by_length: true\n", sft);
  const auto sequential = losses_of(dir, "sequential", "disable_shuffling: true\n", sft);
  const auto plain = losses_of(dir, "plain", "", sft);
  ASSERT_EQ(grouped.size(), 3u);
  EXPECT_NE(sequential, plain);
  EXPECT_EQ(losses_of(dir, "s_grouped", "train_sampling_strategy: group_by_length\n", sft), grouped);
  EXPECT_EQ(losses_of(dir, "s_sequential", "train_sampling_strategy: sequential\n", sft), sequential);
  EXPECT_EQ(losses_of(dir, "s_random", "train_sampling_strategy: random\n", sft), plain);
  const auto bad = run_unillm("train " + pt_config(dir, "bad", "train_sampling_strategy: random\ngroup_by_length: true\n"
                                                              "disable_shuffling: true\n"));
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("train_sampling_strategy: random contradicts group_by_length: true"), std::string::npos) << bad.err;
  const auto odd = run_unillm("train " + pt_config(dir, "odd", "train_sampling_strategy: shuffled\n"));
  EXPECT_EQ(odd.exit_code, 1);
  EXPECT_NE(odd.err.find("train_sampling_strategy"), std::string::npos) << odd.err;
}

// LLaMA-Factory's rope_scaling: cutoff_len 1024 on the 512-position stories260K scales RoPE by
// ceil(1024 / 512) = 2 and writes it (and 1024 positions) into the saved config.json; the
// positions change, so the first loss does too. Within the model's length it is disabled, said.
TEST(DataKeys, RopeScalingFollowsLlamaFactory) {
  const std::string dir = testing::temp_dir("ropescale");
  const std::string flags = " cutoff_len=1024 max_steps=1";
  const auto plain = losses_of(dir, "plain", "", flags);
  const auto r = run_unillm("train " + pt_config(dir, "linear", "finetuning_type: full\nrope_scaling: linear\n") + flags);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("factor 2; max model length enlarged from 512 to 1024"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("beyond the model's max_position_embeddings"), std::string::npos) << r.err;
  const auto cfg = nlohmann::json::parse(testing::slurp(dir + "/linear/config.json"));
  EXPECT_EQ(cfg["max_position_embeddings"], 1024);
  EXPECT_EQ(cfg["rope_scaling"]["rope_type"], "linear");
  EXPECT_EQ(cfg["rope_scaling"]["factor"], 2.0);
  const auto scaled = train_losses(dir + "/linear");
  ASSERT_EQ(plain.size(), 1u);
  ASSERT_EQ(scaled.size(), 1u);
  EXPECT_NE(scaled[0], plain[0]);
  // The saved model generates with its scaled positions (config.json read back).
  EXPECT_EQ(run_unillm("generate --model " + dir + "/linear --prompt-ids 1 --max-new-tokens 4 --quiet").exit_code, 0);
  const auto within = run_unillm("train " + pt_config(dir, "within", "finetuning_type: full\nrope_scaling: llama3\n") +
                                 " cutoff_len=256 max_steps=1");
  ASSERT_EQ(within.exit_code, 0) << within.err;
  EXPECT_NE(within.err.find("rope scaling disabled"), std::string::npos) << within.err;
  EXPECT_TRUE(nlohmann::json::parse(testing::slurp(dir + "/within/config.json"))["rope_scaling"].is_null());
  // yarn: LLaMA-Factory's config (original length kept beside the enlarged one); its frequencies
  // and attention factor change the loss. dynamic: HF rescales only past max_position_embeddings,
  // which now covers cutoff_len, so training keeps the plain run's loss exactly.
  for (const char* type : {"yarn", "dynamic"}) {
    const auto run = run_unillm("train " + pt_config(dir, type, std::string("finetuning_type: full\nrope_scaling: ") + type + "\n") + flags);
    ASSERT_EQ(run.exit_code, 0) << run.err;
    const auto saved = nlohmann::json::parse(testing::slurp(dir + "/" + type + "/config.json"));
    EXPECT_EQ(saved["max_position_embeddings"], 1024);
    EXPECT_EQ(saved["rope_scaling"]["rope_type"], type);
    EXPECT_EQ(saved["rope_scaling"]["original_max_position_embeddings"], 512);
    const auto losses = train_losses(dir + "/" + type);
    ASSERT_EQ(losses.size(), 1u);
    if (std::string(type) == "yarn") EXPECT_NE(losses[0], plain[0]);
    else EXPECT_EQ(losses[0], plain[0]);
    EXPECT_EQ(run_unillm("generate --model " + dir + "/" + type + " --prompt-ids 1 --max-new-tokens 4 --quiet").exit_code, 0);
  }
}

// Token accuracy (metric_for_best_model: accuracy) over neat-packed evaluation rows: each sample
// is scored as its own sequence, so at learning rate 0 the 40 alpaca samples packed into a few
// rows give the unpacked accuracy and loss exactly (cutoff_len large enough that packing's
// cutoff_len − 1 truncates nothing).
TEST(DataKeys, TokenAccuracyOverNeatPackedRowsIsTheUnpackedOne) {
  const std::string dir = testing::temp_dir("accpacked");
  std::vector<nlohmann::json> evals;
  for (const char* p : {"packing=false", "neat_packing=true"}) {
    const auto r = testing::run_unillm_in(
        testing::source_path(""), std::string("train examples/train_lora/stories260K_lora_sft.yaml output_dir=") + dir +
                                      "/" + p + " max_steps=1 learning_rate=0 eval_on_start=false eval_steps=1 val_size=0"
                                      " eval_dataset=alpaca_en_demo cutoff_len=4096 max_samples=40"
                                      " metric_for_best_model=accuracy plot_loss=false --quiet " + p);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    for (const auto& l : testing::log_lines(dir + "/" + p))
      if (l.contains("eval_accuracy")) evals.push_back(l);
  }
  ASSERT_EQ(evals.size(), 2u);
  EXPECT_GT(evals[0]["eval_accuracy"].get<double>(), 0.1);
  EXPECT_EQ(evals[0]["eval_accuracy"], evals[1]["eval_accuracy"]);
  EXPECT_NEAR(evals[0]["eval_loss"].get<double>(), evals[1]["eval_loss"].get<double>(), 1e-9);
}

// early_stopping_steps (HF's EarlyStoppingCallback, patience 2): at learning rate 0 the eval
// loss never improves on the first, so the counter reaches 2 at the third evaluation (step 6 of
// 12) and training stops there. A run killed after checkpoint-4 (counter 1) and resumed starts
// the counter again (HF's default) and stops at step 8, or at 6 with
// restore_callback_states_from_checkpoint.
TEST(DataKeys, EarlyStoppingStopsAfterPatienceEvaluations) {
  const std::string dir = testing::temp_dir("earlystop");
  const std::string extra = "finetuning_type: full\nlearning_rate: 0\nval_size: 0.1\neval_strategy: steps\neval_steps: 2\n"
                            "load_best_model_at_end: true\nearly_stopping_steps: 2\n";
  const auto r = run_unillm("train " + pt_config(dir, "a", extra) + " save_steps=2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("early stopping at step 6"), std::string::npos) << r.err;
  EXPECT_EQ(train_losses(dir + "/a").size(), 6u);
  EXPECT_FALSE(std::filesystem::exists(dir + "/a/checkpoint-8"));
  const auto st = nlohmann::json::parse(testing::slurp(dir + "/a/checkpoint-6/trainer_state.json"));
  EXPECT_EQ(st["stateful_callbacks"]["EarlyStoppingCallback"]["attributes"]["early_stopping_patience_counter"], 2);
  EXPECT_EQ(st["stateful_callbacks"]["EarlyStoppingCallback"]["args"]["early_stopping_patience"], 2);
  for (const auto& [name, restore, stop] : {std::tuple{"b", "false", 8u}, std::tuple{"c", "true", 6u}}) {
    const std::string cfg = pt_config(dir, name, extra);
    ASSERT_EQ(run_unillm("train " + cfg + " save_steps=2 --quiet --kill-after-step 5").exit_code, 128 + 9);
    const auto resumed = run_unillm("train " + cfg + " save_steps=2 resume_from_checkpoint=true "
                                    "restore_callback_states_from_checkpoint=" + restore);
    ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
    EXPECT_EQ(train_losses(dir + "/" + name).size(), stop) << name;
  }
  const auto bad = run_unillm("train " + pt_config(dir, "bad", "early_stopping_steps: 2\n"));
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("early_stopping_steps needs load_best_model_at_end"), std::string::npos) << bad.err;
}

// mix_strategy interleave_under over two datasets (a short one of 10 rows): the run reads 10 of
// each, alternating, so it sees other batches than concat; dpo refuses it.
TEST(DataKeys, MixStrategyInterleavesTheDatasets) {
  const std::string dir = testing::temp_dir("mix");
  const std::string two = " dataset=tinyshakespeare,c4_demo max_samples=10 max_steps=2";
  const auto concat = losses_of(dir, "concat", "", two);
  const auto under = losses_of(dir, "under", "mix_strategy: interleave_under\n", two);
  ASSERT_EQ(concat.size(), 2u);
  ASSERT_EQ(under.size(), 2u);
  EXPECT_NE(concat, under);
  const auto dpo = run_unillm("train " + pt_config(dir, "dpo", "mix_strategy: interleave_over\n") + " stage=dpo");
  EXPECT_NE(dpo.exit_code, 0);
  EXPECT_NE(dpo.err.find("mix_strategy interleave_over with stage dpo is not implemented"), std::string::npos) << dpo.err;
}

// interleave_probs: HF's random interleaving (numpy's generator seeded with `seed`; the picks are
// checked against datasets itself in tests/data_layer/numpy_random_test.cpp). Other
// probabilities give other batches, the same ones give the same (as a string or a list); LLaMA-Factory's
// checks (concat, one probability per dataset) are reported together.
TEST(DataKeys, InterleaveProbsMixesAtRandomBySeed) {
  const std::string dir = testing::temp_dir("mix_probs");
  const std::string two = " dataset=tinyshakespeare,c4_demo max_samples=10 max_steps=2";
  const std::string under = "mix_strategy: interleave_under\n";
  const auto a = losses_of(dir, "a", under + "interleave_probs: 0.3,0.7\n", two);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(losses_of(dir, "a2", under + "interleave_probs: [0.3, 0.7]\n", two), a);
  EXPECT_NE(losses_of(dir, "b", under + "interleave_probs: 0.7,0.3\n", two), a);
  EXPECT_NE(losses_of(dir, "plain", under, two), a);
  const auto bad = run_unillm("train " + pt_config(dir, "bad", "interleave_probs: 0.3,0.3,0.4\n") + two);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("interleave_probs is only valid for interleaved mixing"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("interleave_probs has 3 entries for 2 datasets"), std::string::npos) << bad.err;
  const auto sum = run_unillm("train " + pt_config(dir, "sum", under + "interleave_probs: 0.3,0.3\n") + two);
  EXPECT_NE(sum.exit_code, 0);
  EXPECT_NE(sum.err.find("interleave_probs must sum to 1"), std::string::npos) << sum.err;
}

}  // namespace
}  // namespace unillm
