// ZeRO stage 3 under `mpirun -np 2` (src/train/param_shards.h; docs/training.md, "Stage 3"):
// every parameter, trainable or frozen, is kept as 1/2 per process and gathered per decoder layer
// just in time, gradients are reduce-scattered per layer as backward leaves it, and the run is one
// process's with gradient_accumulation_steps × 2. The data (57 rows in batches of 4) leaves the
// epoch's last step a single micro-batch, so the second process runs the stand-in that keeps
// the collectives in step.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <tuple>
#include <vector>

#include "run_compare_util.h"
#include "tiny_qwen_util.h"

namespace unillm {
namespace {

using testing::expect_runs_close;
using testing::max_weight_diff;
using testing::number_after;

const std::string kSft = "examples/train_lora/stories260K_lora_sft.yaml";
const std::string kShort = " max_steps=8 logging_steps=1 save_steps=4 eval_steps=4 max_samples=64"
                           " per_device_train_batch_size=4 --quiet";
const std::string kZ3 = " deepspeed=tests/data/llamafactory_examples/deepspeed/ds_z3_config.json";

testing::CliResult train(int np, const std::string& args) { return testing::train_processes(np, args); }

TEST(Zero3, ShardsTheParametersAndGivesOneProcessesRun) {
  const std::string dir = testing::temp_dir("zero3_equal");
  for (const auto& [name, config, weights] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"full", kSft + " finetuning_type=full", "model.safetensors"},
           {"full_no_recompute", kSft + " finetuning_type=full disable_gradient_checkpointing=true", "model.safetensors"},
           {"lora", kSft, "adapter_model.safetensors"},
           {"lora_bf16", kSft + " bf16=true", "adapter_model.safetensors"}}) {
    const std::string args = config + kShort + " output_dir=" + dir + "/" + name;
    auto one = train(1, args + "_one gradient_accumulation_steps=2");
    ASSERT_EQ(one.exit_code, 0) << one.err;
    auto z3 = train(2, args + "_z3" + kZ3);
    ASSERT_EQ(z3.exit_code, 0) << z3.err;
    EXPECT_NE(z3.err.find("parameters, gradients and optimizer state sharded over 2 processes in 5 layer units, a "
                          "head unit and a root unit"),
              std::string::npos)
        << z3.err;
    EXPECT_NE(z3.err.find("the model is read straight into this process's shards"), std::string::npos) << z3.err;
    // bf16 saves round to 8 bits of mantissa: where the GEMM's sums are not shape-invariant
    // (run_compare_util.h), a last-bit difference can flip a bf16 rounding, and Adam's first
    // updates amplify it (1e-2 apart in weights after 8 steps on an AVX2 machine): there only
    // the first step is compared.
    if (name == "lora_bf16" && !testing::shape_invariant_gemm()) {
      testing::expect_same_run(dir + "/" + name + "_one", dir + "/" + name + "_z3", {}, name, /*amplifies=*/true);
      continue;
    }
    expect_runs_close(dir + "/" + name + "_one", dir + "/" + name + "_z3", name);
    EXPECT_LE(max_weight_diff(dir + "/" + name + "_one/" + weights, dir + "/" + name + "_z3/" + weights),
              testing::layout_tol(1e-5))
        << name;
    // The checkpoint too (an adapter run's gathers only the trainable parameters for it).
    EXPECT_LE(max_weight_diff(dir + "/" + name + "_one/checkpoint-4/" + weights,
                              dir + "/" + name + "_z3/checkpoint-4/" + weights), testing::layout_tol(1e-5)) << name;
    if (name != "full") continue;
    // Per step each process all-gathers every layer twice (forward, backward) and the root unit
    // (the tied embedding and the final norm) once, and reduce-scatters each once: ring volume
    // (p−1)/p of 4 bytes × (3 · layers + 2 · root) for p = 2, plus the loss and the clip norm.
    const double n = number_after(z3.err, "training "), root = 512 * 64 + 64;
    ASSERT_EQ(n, 260032) << z3.err;
    const double mib = 0.5 * 4 * (3 * (n - root) + 2 * root) / 1048576.0;
    EXPECT_NEAR(number_after(z3.err, "collectives, "), mib, 2e-4) << z3.err;
    // What a process keeps between uses: half of every unit.
    EXPECT_NE(z3.err.find("this process keeps 0.4 of 0.9 MiB of parameters"), std::string::npos) << z3.err;
  }
}

// Qwen3's lm_head of its own: the embedding is a unit of its own, gathered only around the lookup
// and again for its gradient as backward reaches it; Qwen2's tied one stays in the root unit.
// Qwen3's q/k norms of head_dim 8 (32 bytes) are laid out after the 64-byte multiples in the
// written file, so the streamed save comes back to each layer's unit for them.
TEST(Zero3, EmbeddingUnitOfAnUntiedModel) {
  const std::string dir = testing::temp_dir("zero3_qwen");
  for (const std::string type : {"qwen3", "qwen2"}) {
    const std::string model = testing::tiny_qwen(dir, type, type == "qwen3" ? 8 : 16);
    const std::string full = kSft + " finetuning_type=full learning_rate=1e-3" + kShort + " model_name_or_path=" + model +
                             " output_dir=" + dir + "/" + type;
    auto one = train(1, full + "_one gradient_accumulation_steps=2");
    ASSERT_EQ(one.exit_code, 0) << one.err;
    auto z3 = train(2, full + "_z3" + kZ3);
    ASSERT_EQ(z3.exit_code, 0) << z3.err;
    EXPECT_EQ(z3.err.find("2 layer units, an embedding unit, a head unit and a root unit") != std::string::npos, type == "qwen3")
        << z3.err;
    expect_runs_close(dir + "/" + type + "_one", dir + "/" + type + "_z3", type);
    EXPECT_LE(max_weight_diff(dir + "/" + type + "_one/model.safetensors", dir + "/" + type + "_z3/model.safetensors"),
              testing::layout_tol(1e-5))
        << type;
  }
}

// The policy is built without memory and read straight into the shards (one layer whole at a
// time) unless something needs its whole weights first: a grown vocabulary's new rows (the mean
// of the others), adapters merged into the base. A continued adapter's values are kept while the
// base is read around them.
TEST(Zero3, LoadsStraightIntoTheShardsOrWholeWhereItMust) {
  const std::string dir = testing::temp_dir("zero3_load");
  auto first = train(1, kSft + " max_steps=2 max_samples=16 per_device_train_batch_size=4 --quiet output_dir=" + dir + "/first");
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const std::string adapter = " adapter_name_or_path=" + dir + "/first";
  for (const auto& [name, keys, said, weights] : std::vector<std::tuple<std::string, std::string, std::string, std::string>>{
           {"continued", adapter, "read straight into this process's shards", "adapter_model.safetensors"},
           {"merged", adapter + " create_new_adapter=true", "loads whole on every process before it is sharded "
                                                             "(adapter_name_or_path's adapters are merged into the base)",
            "adapter_model.safetensors"},
           {"grown", " finetuning_type=full add_tokens=qqzzyx",
            "loads whole on every process before it is sharded (resize_vocab grows", "model.safetensors"}}) {
    const std::string args = kSft + keys + kShort + " output_dir=" + dir + "/" + name;
    auto one = train(1, args + "_one gradient_accumulation_steps=2");
    ASSERT_EQ(one.exit_code, 0) << one.err;
    auto z3 = train(2, args + "_z3" + kZ3);
    ASSERT_EQ(z3.exit_code, 0) << z3.err;
    EXPECT_NE(z3.err.find(said), std::string::npos) << name << "\n" << z3.err;
    expect_runs_close(dir + "/" + name + "_one", dir + "/" + name + "_z3", name);
    EXPECT_LE(max_weight_diff(dir + "/" + name + "_one/" + weights, dir + "/" + name + "_z3/" + weights),
              testing::layout_tol(1e-5))
        << name;
  }
}

// DPO with LoRA: its reference is the same model with the adapter off, a no-grad forward through
// the same just-in-time layers.
TEST(Zero3, DpoWithLora) {
  const std::string dir = testing::temp_dir("zero3_dpo");
  const std::string args = "examples/train_lora/stories260K_lora_dpo.yaml max_steps=4 logging_steps=1 "
                           "save_strategy=no max_samples=32 bf16=false --quiet output_dir=" + dir;
  auto one = train(1, args + "/one gradient_accumulation_steps=2");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  auto z3 = train(2, args + "/z3 gradient_accumulation_steps=1" + kZ3);
  ASSERT_EQ(z3.exit_code, 0) << z3.err;
  expect_runs_close(dir + "/one", dir + "/z3", "dpo", 5e-5);
}

// DPO full with a frozen reference copy: the copy is loaded after the policy is sharded and is
// sharded too (its layers gathered around their forward) — loaded straight into its shards, or
// (a reference quantised as it is read) sharded once loaded; evaluation gathers per layer as the
// steps do, the process with one eval batch fewer (7 batches over 2) running a stand-in. A
// precomputed reference's pass runs on the sharded policy the same way.
TEST(Zero3, DpoFullShardsItsReferenceAndEvaluatesPerLayer) {
  const std::string dir = testing::temp_dir("zero3_dpo_full");
  const std::vector<std::tuple<std::string, std::string, std::string>> modes = {
      {"model", "ref_mode=model", "sharded too, loaded straight into its shards, in 5 layer units"},
      {"quantised", "ref_mode=model ref_model=assets/stories260K ref_model_quantization_bit=8",
       "sharded too, in 5 layer units"},
      {"precompute", "ref_mode=precompute", ""}};
  for (const auto& [mode, keys, said] : modes) {
    const std::string args = "examples/train_lora/stories260K_lora_dpo.yaml finetuning_type=full " + keys +
                             " max_steps=4 logging_steps=1 eval_strategy=steps eval_steps=2 val_size=7 save_steps=2"
                             " max_samples=40 bf16=false learning_rate=1e-3 --quiet output_dir=" + dir + "/" + mode;
    auto one = train(1, args + "_one gradient_accumulation_steps=2");
    ASSERT_EQ(one.exit_code, 0) << one.err;
    auto z3 = train(2, args + "_z3 gradient_accumulation_steps=1" + kZ3);
    ASSERT_EQ(z3.exit_code, 0) << z3.err;
    EXPECT_EQ(z3.err.find("the reference model's parameters sharded too") != std::string::npos, !said.empty())
        << z3.err;
    if (!said.empty()) {
      EXPECT_NE(z3.err.find(said), std::string::npos) << z3.err;
    }
    // 2 evaluations of 7 pairs; losses as logged, gradient norms within DPO's f32 tolerance.
    ASSERT_EQ(testing::logged_figures(dir + "/" + mode + "_z3").size(), 6u);
    expect_runs_close(dir + "/" + mode + "_one", dir + "/" + mode + "_z3", mode, 5e-5);
    EXPECT_LE(max_weight_diff(dir + "/" + mode + "_one/model.safetensors", dir + "/" + mode + "_z3/model.safetensors"),
              testing::layout_tol(1e-5)) << mode;
  }
}

// Token accuracy (metric_for_best_model accuracy) runs one forward per sequence, and each forward
// gathers every layer: 7 eval rows in batches of 2 give process 0 rows 2 + 2 and process 1 rows
// 2 + 1, so the second tops its last batch up with a stand-in forward (Run::evaluate). Without it
// the processes' gathers fall out of step (an MPI error or a crash).
TEST(Zero3, TokenAccuracyOfUnevenBatchesKeepsTheGathersInStep) {
  const std::string dir = testing::temp_dir("zero3_accuracy");
  const std::string args = kSft + " max_steps=2 logging_steps=1 eval_strategy=steps eval_steps=2 val_size=7 "
                           "per_device_eval_batch_size=2 metric_for_best_model=accuracy max_samples=64 "
                           "per_device_train_batch_size=4 save_strategy=no --quiet output_dir=" + dir;
  auto one = train(1, args + "/one gradient_accumulation_steps=2");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  auto z3 = train(2, args + "/z3" + kZ3);
  ASSERT_EQ(z3.exit_code, 0) << z3.err;
  expect_runs_close(dir + "/one", dir + "/z3", "lora accuracy");
  const std::vector<double> acc_one = testing::logged_values(dir + "/one", "eval_accuracy");
  const std::vector<double> acc_z3 = testing::logged_values(dir + "/z3", "eval_accuracy");
  ASSERT_EQ(acc_one.size(), 2u);  // at steps 0 (the yaml's eval_on_start) and 2
  EXPECT_EQ(acc_one, acc_z3);
}

// A model of more trainable elements than one window of the written optimizer state
// (ZeroOptimizer::kStateWindow): the checkpoint's state is assembled a window at a time, stage 2's
// ranges and stage 3's pieces cut across the window's edge, and the file is plain data
// parallelism's (whose state is whole on each process).
TEST(Zero3, OptimizerStateIsWrittenAWindowAtATime) {
  const std::string dir = testing::temp_dir("zero3_window");
  const std::string model = testing::init_random_model(dir, "model", testing::llama_config(256, 704, 6, 4, 512, 256, true));
  const std::string args = kSft + " finetuning_type=full model_name_or_path=" + model + " cutoff_len=64"
                                  " max_steps=2 save_steps=2 logging_steps=1 max_samples=8 per_device_train_batch_size=2"
                                  " --quiet output_dir=" + dir;
  auto plain = train(2, args + "/plain");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const double n = number_after(plain.err, "training ");
  ASSERT_GT(n, 4194304) << plain.err;  // more than one window
  // Stages 1 and 2 also gather the updated ranges (and stage 2 reduce-scatters the gradients)
  // a window of ZeroOptimizer::kCollectiveWindow elements per rank at a time: 3 windows here.
  for (const std::string z : {"1", "2", "3"}) {
    const std::string how = z == "1" ? " sharding=stage1"
                                     : " deepspeed=tests/data/llamafactory_examples/deepspeed/ds_z" + z + "_config.json";
    auto r = train(2, args + "/z" + z + how);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_LE(max_weight_diff(dir + "/plain/checkpoint-2/optimizer.safetensors", dir + "/z" + z + "/checkpoint-2/optimizer.safetensors"),
              testing::layout_tol(1e-6)) << z;
    EXPECT_LE(max_weight_diff(dir + "/plain/checkpoint-2/model.safetensors", dir + "/z" + z + "/checkpoint-2/model.safetensors"),
              testing::layout_tol(1e-6)) << z;
  }
}

// Full and LoRA runs on 4 processes of `layout` against one process with accumulation × 4: the
// logged figures, the final and checkpoint-4 weights and checkpoint-4's optimizer state (written
// whole, as one process writes it); each of `said` is in the 4-process run's log. Their output
// dirs are dir/full_<tag> and dir/lora_<tag>.
void expect_four_processes_are_one(const std::string& dir, const std::string& tag, const std::string& layout,
                                   const std::vector<std::string>& said) {
  for (const auto& [name, config, weights] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"full", kSft + " finetuning_type=full", "model.safetensors"}, {"lora", kSft, "adapter_model.safetensors"}}) {
    const std::string one_dir = dir + "/" + name + "_one", four_dir = dir + "/" + name + "_" + tag;
    auto one = train(1, config + kShort + " output_dir=" + one_dir + " gradient_accumulation_steps=4");
    ASSERT_EQ(one.exit_code, 0) << one.err;
    auto four = train(4, config + kShort + " output_dir=" + four_dir + layout);
    ASSERT_EQ(four.exit_code, 0) << four.err;
    for (const std::string& line : said) EXPECT_NE(four.err.find(line), std::string::npos) << line << "\n" << four.err;
    expect_runs_close(one_dir, four_dir, name + " " + tag);
    for (const std::string& f : {"/" + weights, "/checkpoint-4/" + weights})
      EXPECT_LE(max_weight_diff(one_dir + f, four_dir + f), testing::layout_tol(1e-5)) << name << f;
    EXPECT_LE(max_weight_diff(one_dir + "/checkpoint-4/optimizer.safetensors", four_dir + "/checkpoint-4/optimizer.safetensors"),
              testing::layout_tol(1e-6))
        << name;
  }
}

// PaddleNLP's sharding_parallel_degree below the process count (HF fsdp's hybrid_shard across
// hosts): 4 processes as 2 sharding groups of 2, each sharding the parameters within itself and
// the groups' gradient shards summed once a step, give one process's run — full (its checkpoint
// written a unit at a time by the writer's group) and LoRA (its adapter gathered whole).
TEST(Zero3, ShardingGroupsReplicatedAcrossDataParallel) {
  expect_four_processes_are_one(
      testing::temp_dir("zero3_hybrid"), "four", " sharding=stage3 sharding_parallel_degree=2",
      {"parameters, gradients and optimizer state sharded over 2 processes in 5 layer units",
       "(sharding groups of 2, 2 replicas)"});
}

// Under pipeline stages (pp 2 × dp 2 on 4 processes): each stage's two replicas shard every
// parameter among themselves and gather its layers together, the stages' gradient shards are
// summed once a step and the stages split the optimizer state by range; the epoch's last step
// leaves a replica short, which runs a stand-in. One process's run, full and LoRA, and a resume
// in the same layout reads each stage's range of the state back. With one replica per stage
// there is nothing to shard among: each stage holds only its own layers, said.
TEST(Zero3, UnderPipelineStagesShardsAmongEachStagesReplicas) {
  const std::string dir = testing::temp_dir("zero3_pp");
  const std::string layout = " pipeline_parallel_degree=2 gradient_accumulation_steps=2" + kZ3;
  expect_four_processes_are_one(
      dir, "pp", layout,
      {"keeps 1/2 of every weight (ZeRO-3 among the stage's replicas",
       "(sharding groups of 2, 2 replicas, one per stage, which split the optimizer state by range)"});
  testing::expect_resumes_under(dir, kSft + " finetuning_type=full" + kShort, "full_pp",
                                {{"full_pp_resumed", 4, "/full_pp/checkpoint-4", layout}}, 5);
  auto pp2 = train(2, kSft + " finetuning_type=full" + kShort + " max_steps=1 save_strategy=no pipeline_parallel_degree=2" +
                          kZ3 + " output_dir=" + dir + "/pp2");
  ASSERT_EQ(pp2.exit_code, 0) << pp2.err;
  EXPECT_NE(pp2.err.find("the parameters are not sharded further under pipeline parallelism with one data-parallel "
                         "replica per stage: each stage holds only its own layers"),
            std::string::npos)
      << pp2.err;
}

// Stage 2 beside pipeline stages (pp 2 × dp 2): each stage holds only its own layers (ParamShards
// by owner) and its two replicas split that stage's optimizer state by range. One process's run,
// full and LoRA, and a resume in the same layout.
TEST(Zero3, StageTwoBesidePipelineStagesSplitsEachStagesState) {
  const std::string dir = testing::temp_dir("zero2_pp");
  const std::string layout = " pipeline_parallel_degree=2 gradient_accumulation_steps=2 sharding=stage2";
  expect_four_processes_are_one(
      dir, "pp", layout,
      {"pipeline parallel: this stage holds 3 of the 5 layers",
       ": the stage's optimizer state split over its 2 data-parallel replicas"});
  testing::expect_resumes_under(dir, kSft + " finetuning_type=full" + kShort, "full_pp",
                                {{"full_pp_resumed", 4, "/full_pp/checkpoint-4", layout}}, 5);
}

TEST(Zero3, CheckpointsAreOneProcessesAndResumeUnderAnyLayout) {
  const std::string dir = testing::temp_dir("zero3_resume");
  const std::string full = kSft + " finetuning_type=full" + kShort;
  auto whole = train(2, full + kZ3 + " output_dir=" + dir + "/whole");
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  auto plain = train(2, full + " output_dir=" + dir + "/plain");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  // The sharded state and weights are saved whole, named and shaped as one process saves them.
  EXPECT_LE(max_weight_diff(dir + "/plain/checkpoint-4/optimizer.safetensors", dir + "/whole/checkpoint-4/optimizer.safetensors"),
            testing::layout_tol(1e-6));
  EXPECT_LE(max_weight_diff(dir + "/plain/checkpoint-4/model.safetensors", dir + "/whole/checkpoint-4/model.safetensors"),
            testing::layout_tol(1e-6));
  // Stage 3's checkpoint continued by stage 3 and by one process (accumulation 2); plain data
  // parallelism's continued by stage 3.
  testing::expect_resumes_under(dir, full, "whole",
                                {{"z3", 2, "/whole/checkpoint-4", kZ3},
                                 {"one", 1, "/whole/checkpoint-4", " gradient_accumulation_steps=2"},
                                 {"from_plain", 2, "/plain/checkpoint-4", kZ3}},
                                5);
}

}  // namespace
}  // namespace unillm
