// Pipeline parallelism under mpirun (src/train/pipeline.h; docs/training.md, "Several
// processes"): stories260K's 5 layers split over 2 processes (1F1B, and interleaved over 4
// virtual stages), with and without recompute, with ZeRO stage 2, alone and beside data
// parallelism, full and LoRA (with dropout), give one process's run with the same micro-batches
// — losses, gradient norms, evaluation and final weights within 1e-5 — and its checkpoints
// resume under one process; the preference stages and SFT's ASFT loss run as stages too. Each
// stage holds only its own layers, and of a reference copy too.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "run_compare_util.h"
#include "tiny_qwen_util.h"

namespace unillm {
namespace {

const std::string& kSft = testing::kStoriesSft;
const std::string& kShort = testing::kStoriesShort;
const std::string& kFull = testing::kStoriesFull;

testing::CliResult train(int np, const std::string& args) {
  return testing::train_processes(np, args);
}
using testing::max_weight_diff;

using testing::expect_runs_close;

TEST(Pipeline, StagesGiveOneProcessesRun) {
  const std::string dir = testing::temp_dir("pipe_equal");
  const std::string ga = " gradient_accumulation_steps=4";
  auto one = train(1, kFull + ga + " output_dir=" + dir + "/one");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  auto pp = train(2, kFull + ga + " pipeline_parallel_degree=2 output_dir=" + dir + "/pp");
  ASSERT_EQ(pp.exit_code, 0) << pp.err;
  // The schedule is printed: stage 0 runs one forward ahead (1F1B).
  EXPECT_NE(pp.err.find("pipeline parallel: 2 stages (1F1B), 1 data-parallel replica"),
            std::string::npos)
      << pp.err;
  EXPECT_NE(pp.err.find("stage 0: layers [0, 3) + embedding; F0 F1 B0 F2 B1 F3 B2 B3"),
            std::string::npos)
      << pp.err;
  EXPECT_NE(pp.err.find("stage 1: layers [3, 5) + norm, lm_head, loss; F0 B0 F1 B1 F2 B2 F3 B3"),
            std::string::npos)
      << pp.err;
  // Evaluation runs forward only through the stages, the last computing the loss: activations
  // move between the stages, not weights.
  EXPECT_NE(pp.err.find("evaluation runs forward only through the stages"), std::string::npos) << pp.err;
  auto vpp = train(
      2, kFull + ga + " pipeline_parallel_degree=2 virtual_pp_degree=2 output_dir=" + dir + "/vpp");
  ASSERT_EQ(vpp.exit_code, 0) << vpp.err;
  EXPECT_NE(vpp.err.find("stage 0: layers [0, 2) [3, 4) + embedding; F0.0 F1.0 F0.1 F1.1"),
            std::string::npos)
      << vpp.err;
  auto plain = train(
      2, kFull + ga +
             " pipeline_parallel_degree=2 disable_gradient_checkpointing=true output_dir=" + dir +
             "/norecompute");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  // Each stage holds only its own layers (the first a copy of the tied embedding too, whose
  // gradient goes to the last stage and whose stepped rows come back): with one replica per stage
  // ZeRO stage 2 has nothing more to split.
  EXPECT_NE(pp.err.find("pipeline parallel: this stage holds 3 of the 5 layers, a copy of the tied embedding: "),
            std::string::npos)
      << pp.err;
  auto z2 = train(2, kFull + ga + " pipeline_parallel_degree=2 sharding=stage2 output_dir=" + dir + "/z2");
  ASSERT_EQ(z2.exit_code, 0) << z2.err;
  EXPECT_NE(z2.err.find(": nothing more to split (one replica per stage, which keeps only its own layers' optimizer state)"),
            std::string::npos)
      << z2.err;
  for (const std::string run : {"pp", "vpp", "norecompute", "z2"}) {
    expect_runs_close(dir + "/one", dir + "/" + run, run);
    EXPECT_LE(
        max_weight_diff(dir + "/one/model.safetensors", dir + "/" + run + "/model.safetensors"),
        testing::layout_tol(1e-5))
        << run;
  }
}

// Each stage holds only its own layers, read straight from the checkpoint (one layer whole at a
// time): an untied Qwen3 (its embedding on the first stage, its lm_head on the last) under pp 2,
// and pp 2 × dp 2 with the stage's optimizer state split over its replicas (ZeRO-1), gives one
// process's losses, gradient norms, evaluations (every layer broadcast by its stage), checkpoint
// (weights written a unit at a time, optimizer state in one process's layout) and final weights.
TEST(Pipeline, StagesHoldOnlyTheirOwnLayers) {
  const std::string dir = testing::temp_dir("pipe_owned");
  const std::string model = testing::tiny_qwen(dir, "qwen3", 16);
  const std::string full = kSft + " finetuning_type=full learning_rate=1e-3" + kShort + " model_name_or_path=" + model +
                           " output_dir=" + dir;
  auto one = train(1, full + "/one gradient_accumulation_steps=4");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  auto pp = train(2, full + "/pp gradient_accumulation_steps=4 pipeline_parallel_degree=2");
  ASSERT_EQ(pp.exit_code, 0) << pp.err;
  auto four = train(4, full + "/four gradient_accumulation_steps=2 pipeline_parallel_degree=2 sharding=stage1");
  ASSERT_EQ(four.exit_code, 0) << four.err;
  for (const auto* r : {&pp, &four}) {
    EXPECT_NE(r->err.find("each stage keeps only its own layers as the model is read, one layer whole at a time"),
              std::string::npos)
        << r->err;
    EXPECT_NE(r->err.find("pipeline parallel: this stage holds 1 of the 2 layers, the embedding: "), std::string::npos)
        << r->err;
  }
  EXPECT_NE(four.err.find("the stage's optimizer state split over its 2 data-parallel replicas"), std::string::npos)
      << four.err;
  for (const std::string run : {"pp", "four"}) {
    expect_runs_close(dir + "/one", dir + "/" + run, run);
    for (const std::string f : {"/model.safetensors", "/checkpoint-4/model.safetensors"})
      EXPECT_LE(max_weight_diff(dir + "/one" + f, dir + "/" + run + f), testing::layout_tol(1e-5)) << run << f;
    EXPECT_LE(max_weight_diff(dir + "/one/checkpoint-4/optimizer.safetensors",
                              dir + "/" + run + "/checkpoint-4/optimizer.safetensors"),
              testing::layout_tol(1e-6))
        << run;
  }
  // Token accuracy's forwards are inference's, whole: with it each process evaluates its batches
  // with whole forwards, each stage broadcasting its layers around them; one process's figures.
  auto aone = train(1, full + "/acc_one gradient_accumulation_steps=4 metric_for_best_model=accuracy");
  ASSERT_EQ(aone.exit_code, 0) << aone.err;
  auto app = train(2, full + "/acc_pp gradient_accumulation_steps=4 pipeline_parallel_degree=2 "
                             "metric_for_best_model=accuracy");
  ASSERT_EQ(app.exit_code, 0) << app.err;
  EXPECT_NE(app.err.find("evaluation runs whole forwards on every process"), std::string::npos) << app.err;
  expect_runs_close(dir + "/acc_one", dir + "/acc_pp", "pp2 with token accuracy");
  const std::vector<double> acc = testing::logged_values(dir + "/acc_one", "eval_accuracy");
  EXPECT_EQ(acc.size(), 3u);  // steps 0, 4 and 8
  EXPECT_EQ(acc, testing::logged_values(dir + "/acc_pp", "eval_accuracy"));
  // Freeze training only the last layer: nothing on the first stage trains (its backward is
  // skipped, where it once failed on an output that needs no gradient).
  const std::string freeze = kSft + " finetuning_type=freeze freeze_trainable_layers=1 learning_rate=1e-3" + kShort +
                             " gradient_accumulation_steps=4 model_name_or_path=" + model + " output_dir=" + dir;
  auto fone = train(1, freeze + "/freeze_one");
  ASSERT_EQ(fone.exit_code, 0) << fone.err;
  auto fpp = train(2, freeze + "/freeze_pp pipeline_parallel_degree=2");
  ASSERT_EQ(fpp.exit_code, 0) << fpp.err;
  expect_runs_close(dir + "/freeze_one", dir + "/freeze_pp", "freeze pp2");
  EXPECT_LE(max_weight_diff(dir + "/freeze_one/model.safetensors", dir + "/freeze_pp/model.safetensors"),
            testing::layout_tol(1e-5));
}

TEST(Pipeline, BesideDataParallelAndWithLora) {
  const std::string dir = testing::temp_dir("pipe_dp_lora");
  // pp 2 × dp 2 on 4 processes, accumulation 2 per replica = one process's accumulation 4.
  auto one = train(1, kFull + " gradient_accumulation_steps=4 output_dir=" + dir + "/one");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  auto four = train(
      4, kFull + " gradient_accumulation_steps=2 pipeline_parallel_degree=2 output_dir=" + dir +
             "/four");
  ASSERT_EQ(four.exit_code, 0) << four.err;
  EXPECT_NE(four.err.find("pipeline parallel: 2 stages (1F1B), 2 data-parallel replicas"),
            std::string::npos)
      << four.err;
  expect_runs_close(dir + "/one", dir + "/four", "pp2 x dp2");
  EXPECT_LE(max_weight_diff(dir + "/one/model.safetensors", dir + "/four/model.safetensors"), testing::layout_tol(1e-5));
  // LoRA with dropout: each stage draws the micro-batch's masks as one process does.
  const std::string lora = kSft + kShort + " lora_dropout=0.1 gradient_accumulation_steps=2";
  auto lone = train(1, lora + " output_dir=" + dir + "/lone");
  ASSERT_EQ(lone.exit_code, 0) << lone.err;
  auto lpp = train(2, lora + " pipeline_parallel_degree=2 output_dir=" + dir + "/lpp");
  ASSERT_EQ(lpp.exit_code, 0) << lpp.err;
  expect_runs_close(dir + "/lone", dir + "/lpp", "lora pp2");
  EXPECT_LE(max_weight_diff(dir + "/lone/adapter_model.safetensors",
                            dir + "/lpp/adapter_model.safetensors"),
            testing::layout_tol(1e-5));
}

// Every stage whose loss needs more than the policy's hidden states (docs/training.md): the
// reference's log-probs (the policy with its adapters off, a frozen copy, a precomputed table),
// KTO's KL rows and ASFT's reference hidden states come from forward-only passes through the
// stages; the reward model's value head (with its dropout) and the preference losses run on the
// last stage. Each gives one process's run with the same micro-batches, in f32: losses as logged,
// gradient norms within grad_rel (DPO's gradient is a sigmoid of differences of sequence
// log-probability sums, whose f32 rounding shows at 2e-5 relative as under tensor parallelism).
TEST(Pipeline, PreferenceStagesAndReferencePasses) {
  const std::string dir = testing::temp_dir("pipe_pref");
  const std::string ex = "examples/train_lora/stories260K_lora_";
  for (const auto& [name, config, extra, grad_rel] :
       std::vector<std::tuple<std::string, std::string, std::string, double>>{
           {"rm_lora", ex + "reward.yaml lora_dropout=0.1", "", 1e-5},
           {"dpo_lora", ex + "dpo.yaml val_size=0.25 eval_strategy=steps eval_steps=2 per_device_eval_batch_size=2",
            "", 5e-5},
           {"dpo_full", ex + "dpo.yaml finetuning_type=full", "", 5e-5},
           {"dpo_table", ex + "dpo.yaml finetuning_type=full ref_mode=precompute", "", 5e-5},
           {"dpo_virtual", ex + "dpo.yaml", " virtual_pp_degree=2", 5e-5},
           {"orpo", ex + "dpo.yaml pref_loss=orpo", "", 1e-5},
           {"kto_lora", ex + "kto.yaml", "", 1e-5},
           // S²-Attn: the reference's target and KL rows in passes of their own, each padded apart.
           {"kto_shift", ex + "kto.yaml shift_attn=true per_device_train_batch_size=2", "", 1e-5},
           {"asft_lora", ex + "sft.yaml use_asft_loss=true", "", 1e-5}}) {
    testing::expect_layout_is_one_process(dir, name, config, " pipeline_parallel_degree=2" + extra, grad_rel);
  }
  // BCO's running baseline is updated on the last stage and copied to the first after each step,
  // so evaluation (which exchanges it between all processes) and the checkpoints process 0 writes
  // carry one process's baseline, and a pp2 checkpoint resumes under one process.
  const std::string bco = ex + "dpo.yaml pref_bco_weight=0.5 val_size=0.25 eval_strategy=steps eval_steps=2"
                               " per_device_eval_batch_size=2 max_steps=4 logging_steps=1 save_steps=2 max_samples=32"
                               " gradient_accumulation_steps=2 bf16=false --quiet output_dir=" + dir + "/bco";
  auto bco_one = train(1, bco + "_one");
  ASSERT_EQ(bco_one.exit_code, 0) << bco_one.err;
  auto bco_pp = train(2, bco + "_pp pipeline_parallel_degree=2");
  ASSERT_EQ(bco_pp.exit_code, 0) << bco_pp.err;
  expect_runs_close(dir + "/bco_one", dir + "/bco_pp", "dpo_bco", 5e-5);
  for (const char* at : {"/checkpoint-2/bco_running.json", "/checkpoint-4/bco_running.json"}) {
    const auto a = nlohmann::json::parse(testing::slurp(dir + "/bco_one" + at));
    const auto b = nlohmann::json::parse(testing::slurp(dir + "/bco_pp" + at));
    EXPECT_GE(a["count"].get<double>(), 4) << at;  // 2 micro-batches per step, and the evaluation's
    EXPECT_EQ(b["count"].get<double>(), a["count"].get<double>()) << at;
    for (const char* k : {"mean", "var"})
      EXPECT_NEAR(b[k].get<double>(), a[k].get<double>(), 5e-5 * (1 + std::abs(a[k].get<double>()))) << at << " " << k;
  }
  std::filesystem::create_directories(dir + "/bco_resumed");
  std::filesystem::copy(dir + "/bco_pp/checkpoint-2", dir + "/bco_resumed/checkpoint-2",
                        std::filesystem::copy_options::recursive);
  auto resumed = train(1, bco + "_resumed resume_from_checkpoint=" + dir + "/bco_resumed/checkpoint-2");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  // Steps 3, 4 and the evaluation: as the pp2 run went on (DPO's f32 rounding, as above).
  testing::expect_same_tail(dir + "/bco_pp", dir + "/bco_resumed", 3, "bco pp2 resumed", 5e-5);
  // Step 1 of LoRA DPO logs ln 2 and zero rewards: the reference pass ran with the adapters off
  // (B = 0, so the policy equals it); by step 4 the rewards have moved (they were not zeroed).
  const auto log = testing::log_lines(dir + "/dpo_lora_layout");
  ASSERT_FALSE(log.empty());
  EXPECT_NEAR(log.front()["loss"].get<double>(), std::log(2.0), 1e-4);
  EXPECT_EQ(log.front()["rewards/chosen"].get<double>(), 0.0);
  double last_reward = 0;
  for (const auto& j : log)
    if (j.contains("rewards/chosen")) last_reward = j["rewards/chosen"].get<double>();
  EXPECT_GT(std::abs(last_reward), 1e-3);
}

// A reference copy (DPO with full fine-tuning, SFT's ASFT) holds only the stage's layers as the
// policy does, read straight into them: its passes in training run through the pipeline, and
// evaluation's whole forwards have each foreign layer broadcast by its stage. One pipeline (against
// one process) and two (pp 2 × dp 2, whose replicas evaluate different batches in lockstep, against
// dp 2), with stories260K's tied
// embedding (in the copy's root unit, which the first stage reads too), give the same run,
// evaluation included.
TEST(Pipeline, ReferenceCopyHoldsOnlyTheStagesLayers) {
  const std::string dir = testing::temp_dir("pipe_refcopy");
  const std::string ex = "examples/train_lora/stories260K_lora_";
  const std::string eval = " val_size=0.25 eval_strategy=steps eval_steps=2 per_device_eval_batch_size=2";
  const std::string base = " max_steps=4 logging_steps=1 save_strategy=no max_samples=40 bf16=false --quiet output_dir=" + dir;
  for (const auto& [name, config] : std::vector<std::pair<std::string, std::string>>{
           {"dpo", ex + "dpo.yaml finetuning_type=full" + eval}, {"asft", ex + "sft.yaml finetuning_type=full use_asft_loss=true" + eval}}) {
    auto one = train(1, config + base + "/" + name + "_one gradient_accumulation_steps=4");
    ASSERT_EQ(one.exit_code, 0) << one.err;
    auto pp = train(2, config + base + "/" + name + "_pp gradient_accumulation_steps=4 pipeline_parallel_degree=2");
    ASSERT_EQ(pp.exit_code, 0) << pp.err;
    EXPECT_NE(pp.err.find("pipeline parallel: the reference model holds only this stage's layers, loaded straight into "
                          "them: this stage holds 3 of the 5 layers, a copy of the tied embedding: "),
              std::string::npos)
        << pp.err;
    expect_runs_close(dir + "/" + name + "_one", dir + "/" + name + "_pp", name + " pp2", 5e-5);
    // Against data parallelism alone with the same micro-batches (ASFT's normalisation is
    // LLaMA-Factory's, which depends on the data-parallel size).
    auto dp = train(2, config + base + "/" + name + "_dp gradient_accumulation_steps=2");
    ASSERT_EQ(dp.exit_code, 0) << dp.err;
    auto four = train(4, config + base + "/" + name + "_four gradient_accumulation_steps=2 pipeline_parallel_degree=2");
    ASSERT_EQ(four.exit_code, 0) << four.err;
    expect_runs_close(dir + "/" + name + "_dp", dir + "/" + name + "_four", name + " pp2 × dp2", 5e-5);
  }
}

TEST(Pipeline, CheckpointsResumeUnderOneProcessAndRefusals) {
  const std::string dir = testing::temp_dir("pipe_resume");
  const std::string ga = " gradient_accumulation_steps=2";
  auto whole = train(2, kFull + ga + " pipeline_parallel_degree=2 output_dir=" + dir + "/whole");
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  std::filesystem::create_directories(dir + "/one");
  std::filesystem::copy(dir + "/whole/checkpoint-4", dir + "/one/checkpoint-4",
                        std::filesystem::copy_options::recursive);
  auto r = train(1, kFull + ga + " output_dir=" + dir + "/one resume_from_checkpoint=" + dir +
                        "/one/checkpoint-4");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  testing::expect_same_tail(dir + "/whole", dir + "/one", 5, "pp2 resumed");  // steps 5-8, final eval
  EXPECT_LE(max_weight_diff(dir + "/whole/model.safetensors", dir + "/one/model.safetensors"),
            testing::layout_tol(1e-5));
  // Refused on every process, with the reason, never a hang.
  const std::string small = kFull + " max_steps=2 save_strategy=no output_dir=" + dir + "/bad";
  const std::vector<std::tuple<int, std::string, std::string>> bad = {
      {3, " pipeline_parallel_degree=2",
       "pipeline_parallel_degree 2 does not divide the 3 processes"},
      {2, " pipeline_parallel_degree=2 virtual_pp_degree=3",
       "5 decoder layers cannot be split into 6 pipeline stages"},
  };
  testing::expect_refused(small, bad);
}

}  // namespace
}  // namespace unillm
