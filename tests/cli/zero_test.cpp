// ZeRO stages 1 and 2 under `mpirun -np 2` (src/train/zero.h; docs/training.md, "Several
// processes"): sharding the optimizer state (stage 1) and the gradients' reduction (stage 2) over
// the arena gives the run of one process with gradient_accumulation_steps × 2 (within f32
// rounding of the reordered sums), checkpoints stay one process's layout so a run resumes under
// any layout; stage 3 runs as stage 2 where it cannot shard the parameters (said at start;
// tests/cli/zero3_test.cpp has the sharded runs), and an optimizer that reads whole matrices
// is refused on every process rather than leaving one waiting.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "run_compare_util.h"

namespace unillm {
namespace {

using testing::run_shell;
using testing::source_path;

const std::string kSft = "examples/train_lora/stories260K_lora_sft.yaml";
const std::string kShort = " max_steps=8 logging_steps=1 save_steps=4 eval_steps=4 max_samples=64"
                           " per_device_train_batch_size=4 --quiet";
const std::string kZ2 = " deepspeed=tests/data/llamafactory_examples/deepspeed/ds_z2_config.json";

testing::CliResult train(int np, const std::string& args) { return testing::train_processes(np, args); }
std::vector<std::pair<double, double>> figures(const std::string& dir) { return testing::logged_figures(dir); }
using testing::max_weight_diff;
using testing::number_after;

using testing::expect_runs_close;

TEST(Zero, StagesOneAndTwoGiveOneProcessesRun) {
  const std::string dir = testing::temp_dir("zero_equal");
  const std::string full = kSft + " finetuning_type=full" + kShort;
  auto one = train(1, full + " gradient_accumulation_steps=2 output_dir=" + dir + "/one");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  auto dp = train(2, full + " output_dir=" + dir + "/dp");
  ASSERT_EQ(dp.exit_code, 0) << dp.err;
  auto z1 = train(2, full + " sharding=stage1 output_dir=" + dir + "/z1");
  ASSERT_EQ(z1.exit_code, 0) << z1.err;
  EXPECT_NE(z1.err.find("ZeRO stage 1: this process keeps the optimizer state of elements [0, "), std::string::npos)
      << z1.err;
  // Stage 1 sums the whole arena as plain data parallelism does, in its buckets during backward;
  // stage 2 reduce-scatters each layer's gradients as backward leaves it (ParamShards' units).
  EXPECT_NE(z1.err.find("gradients summed in 3 buckets"), std::string::npos) << z1.err;
  auto z2 = train(2, full + kZ2 + " output_dir=" + dir + "/z2");
  ASSERT_EQ(z2.exit_code, 0) << z2.err;
  EXPECT_NE(z2.err.find("ds_z2_config.json): gradients and optimizer state sharded over 2 processes, each layer's "
                        "gradients reduce-scattered as backward leaves it"),
            std::string::npos)
      << z2.err;
  EXPECT_EQ(z2.err.find("gradients summed in"), std::string::npos) << z2.err;
  // Each layout moves what its formula says per step (ring volume of the whole f32 arena B =
  // 4·n bytes over p = 2: allreduce 2(p−1)/p·B; stage 1 adds an allgather (p−1)/p·B; stage 2
  // reduce-scatters and all-gathers, (p−1)/p·B each, a unit at a time — each unit padded to a
  // multiple of p elements: a few bytes).
  const double n = number_after(dp.err, "training "), mib = 4 * n / 1048576.0;
  ASSERT_GT(n, 0) << dp.err;
  EXPECT_NEAR(number_after(dp.err, "collectives, "), mib, 2e-4) << dp.err;
  EXPECT_NEAR(number_after(z1.err, "collectives, "), 1.5 * mib, 2e-4) << z1.err;
  EXPECT_NEAR(number_after(z2.err, "collectives, "), mib, 2e-4) << z2.err;
  for (const std::string run : {"dp", "z1", "z2"}) {
    expect_runs_close(dir + "/one", dir + "/" + run, run);
    EXPECT_LE(max_weight_diff(dir + "/one/model.safetensors", dir + "/" + run + "/model.safetensors"), testing::layout_tol(1e-5)) << run;
  }
  // Stage 1 reduces the gradients as plain data parallelism does and updates the same elements
  // with the same arithmetic: the same run.
  EXPECT_EQ(figures(dir + "/dp"), figures(dir + "/z1"));
  EXPECT_LE(max_weight_diff(dir + "/dp/model.safetensors", dir + "/z1/model.safetensors"), 0.0);
}

TEST(Zero, LoraUnderStageTwo) {
  const std::string dir = testing::temp_dir("zero_lora");
  auto one = train(1, kSft + kShort + " gradient_accumulation_steps=2 output_dir=" + dir + "/one");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  auto z2 = train(2, kSft + kShort + kZ2 + " output_dir=" + dir + "/z2");
  ASSERT_EQ(z2.exit_code, 0) << z2.err;
  expect_runs_close(dir + "/one", dir + "/z2", "lora z2");
  EXPECT_LE(max_weight_diff(dir + "/one/adapter_model.safetensors", dir + "/z2/adapter_model.safetensors"), testing::layout_tol(1e-5));
}

TEST(Zero, CheckpointsAreOneProcessesAndResumeUnderAnyLayout) {
  const std::string dir = testing::temp_dir("zero_resume");
  const std::string full = kSft + " finetuning_type=full" + kShort;
  auto whole = train(2, full + kZ2 + " output_dir=" + dir + "/whole");
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  auto plain = train(2, full + " output_dir=" + dir + "/plain");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  // The sharded state is saved whole, named and shaped as one process saves it.
  EXPECT_LE(max_weight_diff(dir + "/plain/checkpoint-4/optimizer.safetensors", dir + "/whole/checkpoint-4/optimizer.safetensors"),
            testing::layout_tol(1e-6));
  // kill -9 after step 4's checkpoint; resumed under the same layout: the same run.
  auto killed = train(2, full + kZ2 + " output_dir=" + dir + "/z2 --kill-after-step 4");
  EXPECT_NE(killed.exit_code, 0);
  ASSERT_TRUE(std::filesystem::exists(dir + "/z2/checkpoint-4/trainer_state.json"));
  auto resumed = train(2, full + kZ2 + " output_dir=" + dir + "/z2 resume_from_checkpoint=true");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_EQ(figures(dir + "/whole"), figures(dir + "/z2"));
  EXPECT_LE(max_weight_diff(dir + "/whole/model.safetensors", dir + "/z2/model.safetensors"), 0.0);
  // The stage-2 checkpoint continued by one process (accumulation 2) and by stage 1, and plain
  // data parallelism's checkpoint continued by stage 2.
  // Its log (a new output_dir) holds steps 5-8 and the final evaluation.
  testing::expect_resumes_under(dir, full, "whole",
                                {{"one", 1, "/whole/checkpoint-4", " gradient_accumulation_steps=2"},
                                 {"z1", 2, "/whole/checkpoint-4", " sharding=stage1"},
                                 {"from_plain", 2, "/plain/checkpoint-4", kZ2}},
                                5);
}

// PaddleNLP's sharding_parallel_degree below the process count: 4 processes as 2 sharding groups
// of 2 (each group's ranges reduced across the groups) give one process's run with accumulation ×4.
// The checkpoint's optimizer state comes from the writer's group alone (the other group holds the
// same ranges): one process's.
TEST(Zero, ShardingGroupsReplicatedAcrossDataParallel) {
  const std::string dir = testing::temp_dir("zero_hybrid");
  const std::string full = kSft + " finetuning_type=full" + kShort + " max_steps=4 save_strategy=steps save_steps=2";
  auto one = train(1, full + " gradient_accumulation_steps=4 output_dir=" + dir + "/one");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  for (const std::string stage : {"stage1", "stage2"}) {
    auto four = train(4, full + " sharding=" + stage + " sharding_parallel_degree=2 output_dir=" + dir + "/" + stage);
    ASSERT_EQ(four.exit_code, 0) << four.err;
    EXPECT_NE(four.err.find("(sharding groups of 2, 2 replicas)"), std::string::npos) << four.err;
    expect_runs_close(dir + "/one", dir + "/" + stage, stage);
    EXPECT_LE(max_weight_diff(dir + "/one/model.safetensors", dir + "/" + stage + "/model.safetensors"), testing::layout_tol(1e-5)) << stage;
    EXPECT_LE(max_weight_diff(dir + "/one/checkpoint-2/optimizer.safetensors",
                              dir + "/" + stage + "/checkpoint-2/optimizer.safetensors"), testing::layout_tol(1e-6)) << stage;
  }
  auto bad = train(4, full + " sharding=stage1 sharding_parallel_degree=3 output_dir=" + dir + "/bad");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.exit_code, 124);
  EXPECT_NE(bad.err.find("sharding_parallel_degree 3 does not divide the 4 data-parallel processes"), std::string::npos)
      << bad.err;
}

TEST(Zero, WhatIsNotBuiltIsRefusedOnEveryProcessOrSaid) {
  const std::string dir = testing::temp_dir("zero_refused");
  const std::string full = kSft + " finetuning_type=full" + kShort + " max_steps=3 save_strategy=no";
  // Stage 3 (LLaMA-Factory's ds_z3_config.json) where its parameters are not sharded (DoRA's
  // magnitudes read whole weights) runs as stage 2 and says so: the same run.
  const std::string z3 = " deepspeed=tests/data/llamafactory_examples/deepspeed/ds_z3_config.json";
  const std::string dora = kSft + kShort + " max_steps=3 save_strategy=no use_dora=true";
  auto three = train(2, dora + z3 + " output_dir=" + dir + "/z3");
  ASSERT_EQ(three.exit_code, 0) << three.err;
  EXPECT_NE(three.err.find("ZeRO stage 3 from command line (deepspeed: tests/data/llamafactory_examples/deepspeed/"
                           "ds_z3_config.json): the parameters are not sharded with DoRA"),
            std::string::npos)
      << three.err;
  auto two = train(2, dora + kZ2 + " output_dir=" + dir + "/z2");
  ASSERT_EQ(two.exit_code, 0) << two.err;
  EXPECT_EQ(figures(dir + "/z2"), figures(dir + "/z3"));
  auto ada = train(2, full + " sharding=stage1 optim=adafactor output_dir=" + dir + "/ada");
  EXPECT_NE(ada.exit_code, 0);
  EXPECT_NE(ada.exit_code, 124);
  EXPECT_NE(ada.err.find("with optimizer adafactor is not implemented yet"), std::string::npos) << ada.err;
  // One process has nothing to shard: stage 3 runs, and says so.
  auto one = train(1, full + z3 + " output_dir=" + dir + "/one");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_NE(one.err.find("one process holds everything"), std::string::npos) << one.err;
}

}  // namespace
}  // namespace unillm
