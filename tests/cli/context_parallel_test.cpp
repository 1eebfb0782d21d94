// Context parallelism under mpirun (docs/ARCHITECTURE.md "Parallel training", CP; docs/training.md
// "Context parallelism"): cp2 splits each micro-batch's tokens over two processes and each
// attention's heads, and gives one process's run with the same micro-batches — losses, gradient
// norms, evaluation and final weights — full and LoRA, on stories260K and on tiny Qwen2 (tied
// embeddings, q/k/v biases) and Qwen3 (q/k norms) models, beside data parallelism, pipeline
// stages and tensor parallelism (4 processes) and all three (8), under the names LLaMA-Factory's Megatron and accelerate configs give it;
// and what it cannot be combined with is refused.
#include <gtest/gtest.h>

#include <tuple>

#include "run_compare_util.h"
#include "tiny_qwen_util.h"

namespace unillm {
namespace {

using testing::kStoriesFull;
using testing::train_processes;

// The largest weight difference of a file in two runs' output dirs, within layout_tol(bound).
void expect_weights_within(const std::string& a, const std::string& b, const std::string& file, double bound) {
  EXPECT_LE(testing::max_weight_diff(a + "/" + file, b + "/" + file), testing::layout_tol(bound)) << b;
}

TEST(ContextParallel, Cp2GivesOneProcessesRun) {
  const std::string dir = testing::temp_dir("cp_equal");
  const std::string ga = " gradient_accumulation_steps=2";
  auto one = train_processes(1, kStoriesFull + ga + " output_dir=" + dir + "/one");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  auto cp = train_processes(2, kStoriesFull + ga + " context_parallel_degree=2 output_dir=" + dir + "/cp");
  ASSERT_EQ(cp.exit_code, 0) << cp.err;
  EXPECT_NE(cp.err.find("context parallel: 2 processes split each micro-batch's tokens"), std::string::npos) << cp.err;
  testing::expect_runs_close(dir + "/one", dir + "/cp", "cp2");
  expect_weights_within(dir + "/one", dir + "/cp", "model.safetensors", 1e-5);
  // Without recompute; and beside data parallelism: 2 pipelines of 2 context-parallel processes.
  auto plain = train_processes(2, kStoriesFull + ga + " context_parallel_degree=2 disable_gradient_checkpointing=true output_dir=" +
                            dir + "/plain");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  testing::expect_runs_close(dir + "/one", dir + "/plain", "cp2 without recompute");
  auto dp = train_processes(4, kStoriesFull + " context_parallel_degree=2 output_dir=" + dir + "/cpdp");
  ASSERT_EQ(dp.exit_code, 0) << dp.err;
  testing::expect_runs_close(dir + "/one", dir + "/cpdp", "cp2 × dp2");
  expect_weights_within(dir + "/one", dir + "/cpdp", "model.safetensors", 1e-5);
  // LLaMA-Factory's Megatron key and accelerate's parallelism_config name the same run.
  auto mcore = train_processes(2, kStoriesFull + ga + " context_parallel_size=2 output_dir=" + dir + "/mcore");
  ASSERT_EQ(mcore.exit_code, 0) << mcore.err;
  testing::expect_runs_close(dir + "/cp", dir + "/mcore", "context_parallel_size");
  auto acc = train_processes(2, kStoriesFull + ga + " 'parallelism_config={cp_size: 2}' output_dir=" + dir + "/acc");
  ASSERT_EQ(acc.exit_code, 0) << acc.err;
  testing::expect_runs_close(dir + "/cp", dir + "/acc", "parallelism_config.cp_size");
}

// A LoRA run with adapter dropout on `np` processes of `layout` against one process: the same run,
// its adapter within 5e-5 (Adam turns f32 rounding of a fresh adapter's near-zero gradients into
// steps of up to ~lr, as under tensor parallelism).
void expect_lora_layout_is_one_process(const std::string& dir, const std::string& ga, const std::string& layout,
                                       const std::string& tag, int np = 4) {
  const std::string lora = testing::kStoriesSft + testing::kStoriesShort + ga + " lora_dropout=0.1";
  auto one = train_processes(1, lora + " output_dir=" + dir + "/lora_one");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  auto split = train_processes(np, lora + layout + " output_dir=" + dir + "/lora_split");
  ASSERT_EQ(split.exit_code, 0) << split.err;
  testing::expect_runs_close(dir + "/lora_one", dir + "/lora_split", tag);
  expect_weights_within(dir + "/lora_one", dir + "/lora_split", "adapter_model.safetensors", 5e-5);
}

// Beside pipeline stages (4 processes: 2 stages of 2 context-parallel processes each sending and
// receiving their rows): full and LoRA, and interleaved without recompute.
TEST(ContextParallel, BesidePipelineStagesGivesOneProcessesRun) {
  const std::string dir = testing::temp_dir("cp_pp");
  const std::string ga = " gradient_accumulation_steps=4";
  const std::string layout = " context_parallel_degree=2 pipeline_parallel_degree=2";
  auto one = train_processes(1, kStoriesFull + ga + " output_dir=" + dir + "/one");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  auto cppp = train_processes(4, kStoriesFull + ga + layout + " output_dir=" + dir + "/cppp");
  ASSERT_EQ(cppp.exit_code, 0) << cppp.err;
  EXPECT_NE(cppp.err.find("pipeline parallel: 2 stages"), std::string::npos) << cppp.err;
  EXPECT_NE(cppp.err.find("context parallel: 2 processes split each micro-batch's tokens"), std::string::npos)
      << cppp.err;
  testing::expect_runs_close(dir + "/one", dir + "/cppp", "cp2 × pp2");
  expect_weights_within(dir + "/one", dir + "/cppp", "model.safetensors", 1e-5);
  auto vpp = train_processes(4, kStoriesFull + ga + layout +
                                    " virtual_pp_degree=2 disable_gradient_checkpointing=true output_dir=" + dir + "/vpp");
  ASSERT_EQ(vpp.exit_code, 0) << vpp.err;
  EXPECT_NE(vpp.err.find("2 stages × 2 virtual (interleaved)"), std::string::npos) << vpp.err;
  testing::expect_runs_close(dir + "/one", dir + "/vpp", "cp2 × pp2 interleaved, without recompute");
  expect_weights_within(dir + "/one", dir + "/vpp", "model.safetensors", 1e-5);
  expect_lora_layout_is_one_process(dir, ga, layout, "lora cp2 × pp2");
}

// Beside tensor parallelism (4 processes: cp 2 × tp 2): the four split each attention's heads
// and the tokens, each pair of tensor-parallel processes its context shard's MLPs. Full with and
// without recompute, LoRA; a model whose key/value heads the four cannot split is refused.
TEST(ContextParallel, BesideTensorParallelismGivesOneProcessesRun) {
  const std::string dir = testing::temp_dir("cp_tp");
  const std::string ga = " gradient_accumulation_steps=2";
  const std::string layout = " context_parallel_degree=2 tensor_parallel_degree=2";
  auto one = train_processes(1, kStoriesFull + ga + " output_dir=" + dir + "/one");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  auto cptp = train_processes(4, kStoriesFull + ga + layout + " output_dir=" + dir + "/cptp");
  ASSERT_EQ(cptp.exit_code, 0) << cptp.err;
  EXPECT_NE(cptp.err.find("context parallel: 2 × tensor parallel: 2: 4 processes split each micro-batch's tokens"),
            std::string::npos)
      << cptp.err;
  testing::expect_runs_close(dir + "/one", dir + "/cptp", "cp2 × tp2");
  expect_weights_within(dir + "/one", dir + "/cptp", "model.safetensors", 1e-5);
  auto plain = train_processes(4, kStoriesFull + ga + layout + " disable_gradient_checkpointing=true output_dir=" +
                                      dir + "/plain");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  testing::expect_runs_close(dir + "/one", dir + "/plain", "cp2 × tp2 without recompute");
  expect_weights_within(dir + "/one", dir + "/plain", "model.safetensors", 1e-5);
  expect_lora_layout_is_one_process(dir, ga, layout, "lora cp2 × tp2");
  auto qwen = train_processes(4, kStoriesFull + layout + " max_steps=1 save_strategy=no model_name_or_path=" +
                                     testing::tiny_qwen(dir, "qwen2", 16) + " output_dir=" + dir + "/qwen");
  EXPECT_NE(qwen.exit_code, 0);
  EXPECT_NE(qwen.err.find("context_parallel_degree 2 × tensor_parallel_degree 2: "), std::string::npos) << qwen.err;
}

// All three (8 processes: 2 stages, each of cp 2 × tp 2): each stage's four processes split its
// layers' heads and tokens as above and send their rows to the next stage's four. Full and LoRA.
TEST(ContextParallel, BesideTensorAndPipelineParallelismGivesOneProcessesRun) {
  const std::string dir = testing::temp_dir("cp_tp_pp");
  const std::string ga = " gradient_accumulation_steps=4";
  const std::string layout = " context_parallel_degree=2 tensor_parallel_degree=2 pipeline_parallel_degree=2";
  auto one = train_processes(1, kStoriesFull + ga + " output_dir=" + dir + "/one");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  auto all = train_processes(8, kStoriesFull + ga + layout + " output_dir=" + dir + "/all");
  ASSERT_EQ(all.exit_code, 0) << all.err;
  EXPECT_NE(all.err.find("pipeline parallel: 2 stages"), std::string::npos) << all.err;
  EXPECT_NE(all.err.find("context parallel: 2 × tensor parallel: 2: 4 processes split each micro-batch's tokens"),
            std::string::npos)
      << all.err;
  testing::expect_runs_close(dir + "/one", dir + "/all", "cp2 × tp2 × pp2");
  expect_weights_within(dir + "/one", dir + "/all", "model.safetensors", 1e-5);
  expect_lora_layout_is_one_process(dir, ga, layout, "lora cp2 × tp2 × pp2", 8);
}

// Frozen split weights held as blocks (train/tp_blocks.h) beside context parallelism: the
// attention's over all the processes (their heads), the MLPs' whole under cp alone (they run
// whole on a process's rows) or over a context shard's tensor-parallel pair under cp 2 × tp 2.
// Freeze tuning with evaluation (split forwards, multiplying the blocks), checkpoints and the best
// checkpoint reloaded (the phases that gather the blocks whole) gives one process's run.
TEST(ContextParallel, FrozenSplitWeightsHeldAsBlocks) {
  const std::string dir = testing::temp_dir("cp_blocks");
  const std::string freeze = testing::kStoriesSft + testing::kStoriesShort +
                             " finetuning_type=freeze freeze_trainable_layers=2 gradient_accumulation_steps=2 "
                             "load_best_model_at_end=true metric_for_best_model=eval_loss";
  auto one = train_processes(1, freeze + " output_dir=" + dir + "/one");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  for (const auto& [np, layout, line] : std::vector<std::tuple<int, std::string, std::string>>{
           {2, "context_parallel_degree=2", "only its blocks of the 6 frozen split weights: 0.07 of 0.14 MiB"},
           {4, "context_parallel_degree=2 tensor_parallel_degree=2",
            "only its blocks of the 12 frozen split weights: 0.22 of 0.52 MiB"}}) {
    const std::string out = dir + "/" + std::to_string(np);
    auto split = train_processes(np, freeze + " " + layout + " output_dir=" + out);
    ASSERT_EQ(split.exit_code, 0) << split.err;
    EXPECT_NE(split.err.find(line), std::string::npos) << split.err;
    EXPECT_NE(split.err.find("evaluation runs split forwards as training does"), std::string::npos) << split.err;
    EXPECT_NE(split.err.find("loading the best checkpoint"), std::string::npos) << split.err;
    testing::expect_runs_close(dir + "/one", out, layout);
    expect_weights_within(dir + "/one", out, "model.safetensors", 1e-5);
    expect_weights_within(dir + "/one/checkpoint-4", out + "/checkpoint-4", "model.safetensors", 1e-5);
  }
}

TEST(ContextParallel, LoraAndQwenModels) {
  const std::string dir = testing::temp_dir("cp_lora_qwen");
  // With adapter dropout: the MLPs' masks are drawn for their rows of the whole batch.
  const std::string lora = testing::kStoriesSft + testing::kStoriesShort + " gradient_accumulation_steps=2 lora_dropout=0.1";
  auto lone = train_processes(1, lora + " output_dir=" + dir + "/lone");
  ASSERT_EQ(lone.exit_code, 0) << lone.err;
  auto lcp = train_processes(2, lora + " context_parallel_degree=2 output_dir=" + dir + "/lcp");
  ASSERT_EQ(lcp.exit_code, 0) << lcp.err;
  testing::expect_runs_close(dir + "/lone", dir + "/lcp", "lora cp2");
  EXPECT_NE(lcp.err.find("only its blocks of the 10 frozen split weights"), std::string::npos) << lcp.err;
  // Adam turns f32 rounding of a fresh adapter's near-zero gradients into steps of up to ~lr (as
  // under tensor parallelism, tests/cli/tensor_parallel_test.cpp).
  expect_weights_within(dir + "/lone", dir + "/lcp", "adapter_model.safetensors", 5e-5);
  for (const std::string type : {"qwen2", "qwen3"}) {
    const std::string full = kStoriesFull + " gradient_accumulation_steps=2 learning_rate=1e-3 model_name_or_path=" +
                             testing::tiny_qwen(dir, type, 16);
    auto one = train_processes(1, full + " output_dir=" + dir + "/" + type + "_one");
    ASSERT_EQ(one.exit_code, 0) << one.err;
    auto cp = train_processes(2, full + " context_parallel_degree=2 output_dir=" + dir + "/" + type + "_cp");
    ASSERT_EQ(cp.exit_code, 0) << cp.err;
    testing::expect_runs_close(dir + "/" + type + "_one", dir + "/" + type + "_cp", type);
    expect_weights_within(dir + "/" + type + "_one", dir + "/" + type + "_cp", "model.safetensors", 1e-5);
  }
}

TEST(ContextParallel, WhatItCannotJoinIsRefused) {
  const std::string dir = testing::temp_dir("cp_refusals");
  testing::expect_refused(
      kStoriesFull + " output_dir=" + dir + "/out",
      {{1, " context_parallel_degree=2", "context_parallel_degree 2 does not divide the 1 processes"},
       {2, " context_parallel_degree=2 tensor_parallel_degree=2",
        "context_parallel_degree 2 × tensor_parallel_degree 2 does not divide the 2 processes"},
       {2, " context_parallel_degree=2 use_dft_loss=true",
        "context parallelism (context_parallel_degree 2) with stage sft and its loss variant is not implemented yet"},
       {2, " context_parallel_degree=2 context_parallel_size=4",
        "context_parallel_size 4 and context_parallel_degree 2 ask for two sizes"}});
}

}  // namespace
}  // namespace unillm
