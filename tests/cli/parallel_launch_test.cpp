// `unillm train` as several processes (mpirun -np 2 on loopback; docs/training.md, "Several
// processes"): data parallelism equals one process with gradient_accumulation_steps × 2 — bit for
// bit where each weight gets one gradient term per micro-batch (LoRA), to f32 rounding where the
// order of a sum changes (a tied embedding's two terms in full fine-tuning) — a kill -9 resumes
// exactly, a checkpoint of 2 × 1 resumes as 1 × 2 and back, and what is not supported yet stops
// every process with a clear error instead of leaving one waiting. Dropout draws the same masks. torchrun's variables are refused
// naming mpirun.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "run_compare_util.h"

namespace unillm {
namespace {

using testing::run_shell;
using testing::slurp;
using testing::source_path;

const std::string kSft = "examples/train_lora/stories260K_lora_sft.yaml";
const std::string kDpo = "examples/train_lora/stories260K_lora_dpo.yaml";
const std::string kShort = " max_steps=6 logging_steps=1 save_steps=3 eval_steps=3 max_samples=64"
                           " per_device_train_batch_size=4 --quiet";

testing::CliResult train(int np, const std::string& args) { return testing::train_processes(np, args); }
std::vector<std::pair<double, double>> figures(const std::string& dir) { return testing::logged_figures(dir); }

TEST(DataParallel, TwoProcessesEqualOneWithTwiceTheAccumulation) {
  const std::string dir = testing::temp_dir("dp_equal");
  // DPO as tests/cli/dpo_test.cpp shortens it: short rows, 2 pairs a micro-batch.
  const std::string dpo_short = " cutoff_len=96 max_samples=30 val_size=0.2 per_device_train_batch_size=2"
                                " learning_rate=5.0e-3 warmup_ratio=0 max_steps=4 logging_steps=1 save_steps=2"
                                " eval_strategy=steps eval_steps=2 per_device_eval_batch_size=4 --quiet";
  for (const std::string& cfg : {kSft, kDpo}) {
    const std::string tag = cfg == kSft ? "sft" : "dpo";
    const std::string args = cfg == kSft ? kShort : dpo_short;
    auto one = train(1, cfg + " output_dir=" + dir + "/" + tag + "1 gradient_accumulation_steps=2" + args);
    ASSERT_EQ(one.exit_code, 0) << one.err;
    auto two = train(2, cfg + " output_dir=" + dir + "/" + tag + "2 gradient_accumulation_steps=1" + args);
    ASSERT_EQ(two.exit_code, 0) << two.err;
    EXPECT_NE(two.err.find("data parallel: 2 processes"), std::string::npos) << two.err;
    ASSERT_GE(figures(dir + "/" + tag + "1").size(), 6u) << tag;
    testing::expect_same_run(dir + "/" + tag + "1", dir + "/" + tag + "2", {"/adapter_model.safetensors"}, tag,
                             /*amplifies=*/tag == "dpo");
  }
  // The preference metrics are merged over the processes as one process averages them.
  const auto l1 = testing::train_lines(dir + "/dpo1"), l2 = testing::train_lines(dir + "/dpo2");
  ASSERT_EQ(l1.size(), l2.size());
  // (Bit for bit at every step where the GEMM is shape-invariant, else the first step's to f32
  // rounding: expect_same_run.)
  for (size_t i = 0; i < (testing::shape_invariant_gemm() ? l1.size() : std::min<size_t>(1, l1.size())); ++i)
    for (const char* k : {"rewards/margins", "rewards/accuracies", "logps/chosen", "logits/rejected"})
      if (testing::shape_invariant_gemm())
        EXPECT_DOUBLE_EQ(l1[i][k].get<double>(), l2[i][k].get<double>()) << k << " step " << i + 1;
      else
        EXPECT_NEAR(l1[i][k].get<double>(), l2[i][k].get<double>(), 1e-4 * (1 + std::abs(l1[i][k].get<double>())))
            << k << " step " << i + 1;
}

// accelerate's split_batches: the batch sizes are global, so 4 rows over 2 processes are the run
// of 2 rows on each; a size the processes do not divide is refused (accelerate's rule).
TEST(DataParallel, SplitBatchesDividesTheGlobalBatch) {
  const std::string dir = testing::temp_dir("dp_split");
  auto per2 = train(2, kSft + " output_dir=" + dir + "/per2" + kShort +
                          " per_device_train_batch_size=2 per_device_eval_batch_size=2");
  ASSERT_EQ(per2.exit_code, 0) << per2.err;
  auto split = train(2, kSft + " output_dir=" + dir + "/split" + kShort +
                           " per_device_eval_batch_size=4 accelerator_config.split_batches=true");
  ASSERT_EQ(split.exit_code, 0) << split.err;
  EXPECT_NE(split.err.find("split_batches: each of the 2 data-parallel processes takes 2 rows"), std::string::npos)
      << split.err;
  const auto a = figures(dir + "/per2"), b = figures(dir + "/split");
  ASSERT_GE(a.size(), 6u);
  EXPECT_EQ(a, b);
  EXPECT_EQ(slurp(dir + "/per2/adapter_model.safetensors"), slurp(dir + "/split/adapter_model.safetensors"));
  auto odd = train(2, kSft + " output_dir=" + dir + "/odd" + kShort + " split_batches=true per_device_train_batch_size=3");
  EXPECT_NE(odd.exit_code, 0);
  EXPECT_NE(odd.err.find("per_device_train_batch_size 3 is the global batch and must be a multiple of the 2"),
            std::string::npos) << odd.err;
}

// Dropout (the reward model's value-head dropout 0.1, LoRA dropout 0.1): each micro-batch draws
// from a generator seeded by its place in the step, so two processes draw what one does.
TEST(DataParallel, DropoutDrawsTheSameMasksAsOneProcess) {
  const std::string dir = testing::temp_dir("dp_dropout");
  const std::string rm = "examples/train_lora/stories260K_lora_reward.yaml lora_dropout=0.1 cutoff_len=96"
                         " max_samples=24 bf16=false max_steps=3 logging_steps=1 save_strategy=no --quiet";
  // (Accumulation 1 on each process, so each weight's gradient is summed in one process's order.)
  auto one = train(1, rm + " gradient_accumulation_steps=2 output_dir=" + dir + "/one");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  auto two = train(2, rm + " gradient_accumulation_steps=1 output_dir=" + dir + "/two");
  ASSERT_EQ(two.exit_code, 0) << two.err;
  ASSERT_EQ(figures(dir + "/one").size(), 3u);
  testing::expect_same_run(dir + "/one", dir + "/two", {"/adapter_model.safetensors", "/value_head.safetensors"},
                           "dropout");
  // The same run without LoRA dropout differs: the masks are really drawn and applied.
  auto off = train(1, rm + " gradient_accumulation_steps=2 lora_dropout=0 output_dir=" + dir + "/off");
  ASSERT_EQ(off.exit_code, 0) << off.err;
  EXPECT_NE(figures(dir + "/off"), figures(dir + "/one"));
}

TEST(DataParallel, KilledRunsResumeExactlyAndAcrossLayouts) {
  const std::string dir = testing::temp_dir("dp_resume");
  const std::string full = kSft + " finetuning_type=full" + kShort;
  auto whole = train(2, full + " output_dir=" + dir + "/whole");
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  // kill -9 (rank 0, after step 3's checkpoint): mpirun ends the other process.
  auto killed = train(2, full + " output_dir=" + dir + "/dp --kill-after-step 3");
  EXPECT_NE(killed.exit_code, 0);
  ASSERT_TRUE(std::filesystem::exists(dir + "/dp/checkpoint-3/trainer_state.json"));
  auto resumed = train(2, full + " output_dir=" + dir + "/dp resume_from_checkpoint=true");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_EQ(figures(dir + "/whole"), figures(dir + "/dp"));
  EXPECT_EQ(slurp(dir + "/whole/model.safetensors"), slurp(dir + "/dp/model.safetensors"));
  // The same checkpoint continued by one process accumulating 2 micro-batches: the same run up to
  // the order of the tied embedding's gradient sum.
  std::filesystem::create_directories(dir + "/one");
  std::filesystem::copy(dir + "/dp/checkpoint-3", dir + "/one/checkpoint-3", std::filesystem::copy_options::recursive);
  auto one = train(1, full + " gradient_accumulation_steps=2 output_dir=" + dir + "/one resume_from_checkpoint=" + dir +
                          "/one/checkpoint-3");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  // Its log (a new output_dir) starts after step 3: steps 4-6 and the final evaluation.
  const auto a = figures(dir + "/whole"), b = figures(dir + "/one");
  ASSERT_EQ(b.size(), 4u);
  ASSERT_EQ(a.size(), 9u);
  for (size_t i = 0; i < b.size(); ++i) {
    const auto& w = a[a.size() - b.size() + i];
    EXPECT_NEAR(w.first, b[i].first, 1e-4) << i;  // the log rounds losses to 4 decimals
    EXPECT_NEAR(w.second, b[i].second, testing::layout_tol(1e-6) * std::abs(w.second) + 1e-12) << i;
  }
  // A different accumulation than the checkpoint's global one is still refused.
  auto bad = train(1, full + " gradient_accumulation_steps=1 output_dir=" + dir + "/one resume_from_checkpoint=" + dir +
                          "/one/checkpoint-3");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("gradient_accumulation_steps: 2 -> 1"), std::string::npos) << bad.err;
}

// BCO's running reward baseline (pref_bco_weight): every process applies each round's batch
// rewards in rank order, so two processes keep the baseline one process with twice the
// accumulation keeps — losses, metrics and adapter bit for bit — through an epoch's last group
// where one process sits a round out, and through evaluations with a batch fewer on one process
// (the evaluation moves the baseline too, as in LLaMA-Factory).
TEST(DataParallel, BcoBaselineIsOneProcesssAcrossTwo) {
  const std::string dir = testing::temp_dir("dp_bco");
  const std::string args = " pref_bco_weight=0.5 cutoff_len=96 max_samples=28 val_size=0.2 per_device_train_batch_size=2"
                           " learning_rate=5.0e-3 warmup_ratio=0 max_steps=7 logging_steps=1 save_steps=100"
                           " eval_strategy=steps eval_steps=3 per_device_eval_batch_size=2 --quiet";
  auto one = train(1, kDpo + " output_dir=" + dir + "/one gradient_accumulation_steps=2" + args);
  ASSERT_EQ(one.exit_code, 0) << one.err;
  auto two = train(2, kDpo + " output_dir=" + dir + "/two gradient_accumulation_steps=1" + args);
  ASSERT_EQ(two.exit_code, 0) << two.err;
  ASSERT_GE(figures(dir + "/one").size(), 9u);
  testing::expect_same_run(dir + "/one", dir + "/two", {"/adapter_model.safetensors"}, "bco", /*amplifies=*/true);
}

// do_predict with predict_with_generate shared by two processes (every second prompt each, with
// its seed in the whole set): sampled predictions and their scores are one process's, line for
// line; after training under two processes the trained adapter answers.
TEST(DataParallel, PredictWithGenerateSharedByTwoProcessesIsOneProcesss) {
  const std::string dir = testing::temp_dir("dp_predict");
  const std::string predict = "examples/extras/nlg_eval/stories260K_lora_predict.yaml adapter_name_or_path=null"
                              " finetuning_type=full max_samples=5 max_new_tokens=12 per_device_eval_batch_size=2 --quiet";
  auto one = train(1, predict + " output_dir=" + dir + "/one");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  auto two = train(2, predict + " output_dir=" + dir + "/two");
  ASSERT_EQ(two.exit_code, 0) << two.err;
  const std::string lines = slurp(dir + "/one/generated_predictions.jsonl");
  EXPECT_EQ(std::count(lines.begin(), lines.end(), '\n'), 10);  // 5 of identity, 5 of alpaca_en_demo
  EXPECT_EQ(slurp(dir + "/two/generated_predictions.jsonl"), lines);
  const auto a = nlohmann::json::parse(slurp(dir + "/one/predict_results.json"));
  const auto b = nlohmann::json::parse(slurp(dir + "/two/predict_results.json"));
  for (const char* k : {"predict_bleu-4", "predict_rouge-1", "predict_rouge-2", "predict_rouge-l"}) EXPECT_EQ(a[k], b[k]) << k;
  auto trained = train(2, kSft + " output_dir=" + dir + "/trained do_predict=true predict_with_generate=true do_eval=false"
                             " eval_strategy=no val_size=0 eval_dataset=alpaca_en_demo max_new_tokens=8" + kShort);
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  const std::string after = slurp(dir + "/trained/generated_predictions.jsonl");
  EXPECT_EQ(std::count(after.begin(), after.end(), '\n'), 64);
  EXPECT_TRUE(std::filesystem::exists(dir + "/trained/predict_results.json"));
}

// accelerate's ParallelismConfig (HF's parallelism_config) names the same layouts: dp_shard_size
// is FSDP's full shard (ZeRO stage 3) over that many processes, tp_size the tensor-parallel degree;
// sizes that do not multiply to the process count are refused on every process.
TEST(DataParallel, AcceleratesParallelismConfigGivesTheSameLayouts) {
  const std::string dir = testing::temp_dir("dp_parallelism_config");
  const std::string base = kSft + " finetuning_type=full" + kShort + " save_strategy=no output_dir=" + dir;
  auto fsdp = train(2, base + "/fsdp fsdp=full_shard");
  ASSERT_EQ(fsdp.exit_code, 0) << fsdp.err;
  auto shard = train(2, base + "/shard 'parallelism_config={dp_shard_size: 2}'");
  ASSERT_EQ(shard.exit_code, 0) << shard.err;
  EXPECT_NE(shard.err.find("(parallelism_config: dp_shard_size 2): parameters, gradients and optimizer state sharded "
                           "over 2 processes"),
            std::string::npos)
      << shard.err;
  ASSERT_FALSE(figures(dir + "/fsdp").empty());
  EXPECT_EQ(figures(dir + "/shard"), figures(dir + "/fsdp"));
  auto tp = train(2, base + "/tp tensor_parallel_degree=2");
  ASSERT_EQ(tp.exit_code, 0) << tp.err;
  auto tp_size = train(2, base + "/tp_size 'parallelism_config={tp_size: 2}'");
  ASSERT_EQ(tp_size.exit_code, 0) << tp_size.err;
  EXPECT_NE(tp_size.err.find("tensor parallel"), std::string::npos) << tp_size.err;
  ASSERT_FALSE(figures(dir + "/tp").empty());
  EXPECT_EQ(figures(dir + "/tp_size"), figures(dir + "/tp"));
  auto four = train(2, base + "/four 'parallelism_config={tp_size: 2, dp_replicate_size: 2}'");
  EXPECT_NE(four.exit_code, 0);
  EXPECT_NE(four.exit_code, 124) << "timed out: a process was left waiting";
  EXPECT_NE(four.err.find("parallelism_config asks for 4 processes (dp_replicate_size 2 × dp_shard_size 1 × tp_size 2 "
                          "× cp_size 1) but the job has 2"),
            std::string::npos)
      << four.err;
  EXPECT_FALSE(std::filesystem::exists(dir + "/four"));
}

// HF fsdp's hybrid_shard_zero2 shards within each host: on one host that is every process, so
// the run is shard_grad_op's (tests/dist/multihost_test.cpp runs it on two hosts).
TEST(DataParallel, HybridShardOnOneHostShardsOverItsProcesses) {
  const std::string dir = testing::temp_dir("dp_hybrid");
  const std::string base = kSft + kShort + " save_strategy=no output_dir=" + dir;
  auto z2 = train(2, base + "/z2 fsdp=shard_grad_op");
  ASSERT_EQ(z2.exit_code, 0) << z2.err;
  auto hybrid = train(2, base + "/hybrid fsdp=hybrid_shard_zero2");
  ASSERT_EQ(hybrid.exit_code, 0) << hybrid.err;
  EXPECT_NE(hybrid.err.find("sharding groups of each host's 2 processes, replicated over 1 host"), std::string::npos)
      << hybrid.err;
  ASSERT_FALSE(figures(dir + "/z2").empty());
  EXPECT_EQ(figures(dir + "/hybrid"), figures(dir + "/z2"));
}

TEST(DataParallel, TorchrunVariablesAreRefusedNamingMpirun) {
  const std::string dir = testing::temp_dir("torchrun_train");
  auto r = run_shell("cd " + source_path("") + " && RANK=0 WORLD_SIZE=2 " + std::string(UNILLM_BINARY_DIR) +
                     "/unillm train " + kSft + " output_dir=" + dir + "/out --quiet");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("mpirun"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir + "/out"));
}

}  // namespace
}  // namespace unillm
