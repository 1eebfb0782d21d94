// LLaMA-Factory's Megatron-path keys under mpirun (train/args_megatron.cpp; docs/training.md
// "LLaMA-Factory's Megatron keys"): tensor_model_parallel_size with sequence_parallel and the
// distributed optimizer, and pipeline_model_parallel_size, each give one process's run of
// stories260K within the layout bounds; calculate_per_token_loss: false makes a step's loss the
// mean of its micro-batches' means, checked against the micro-batches' own losses from a run
// that does not move the weights.
#include <gtest/gtest.h>

#include <cmath>

#include "run_compare_util.h"

namespace unillm {
namespace {

testing::CliResult train(int np, const std::string& args) { return testing::train_processes(np, args); }

TEST(MegatronKeys, TensorAndPipelineSizesGiveOneProcessesRun) {
  const std::string dir = testing::temp_dir("megatron_keys");
  const std::string full = testing::kStoriesFull + " gradient_accumulation_steps=2";
  auto one = train(1, full + " output_dir=" + dir + "/one");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  auto tp = train(2, full + " tensor_model_parallel_size=2 sequence_parallel=true use_distributed_optimizer=true "
                            "recompute_granularity=full overlap_grad_reduce=true output_dir=" + dir + "/tp");
  ASSERT_EQ(tp.exit_code, 0) << tp.err;
  EXPECT_NE(tp.err.find("tensor parallel: 2 processes split each layer's attention heads"), std::string::npos) << tp.err;
  EXPECT_NE(tp.err.find("ZeRO stage 1: this process keeps the optimizer state"), std::string::npos) << tp.err;
  auto pp = train(2, full + " pipeline_model_parallel_size=2 output_dir=" + dir + "/pp");
  ASSERT_EQ(pp.exit_code, 0) << pp.err;
  EXPECT_NE(pp.err.find("pipeline parallel: 2 stages"), std::string::npos) << pp.err;
  for (const std::string run : {"tp", "pp"}) {
    testing::expect_runs_close(dir + "/one", dir + "/" + run, run);
    EXPECT_LE(testing::max_weight_diff(dir + "/one/model.safetensors", dir + "/" + run + "/model.safetensors"),
              testing::layout_tol(1e-5))
        << run;
  }
}

TEST(MegatronKeys, PerMicroBatchMeanLoss) {
  const std::string dir = testing::temp_dir("megatron_loss");
  // learning_rate 0: every step sees the initial weights, so a run accumulating 1 logs each
  // micro-batch's own mean loss, in the order a run accumulating 2 groups them.
  const std::string base = testing::kStoriesSft +
                           " finetuning_type=full max_steps=4 logging_steps=1 save_strategy=no eval_strategy=no "
                           "max_samples=64 per_device_train_batch_size=1 learning_rate=0 --quiet";
  auto each = train(1, base + " gradient_accumulation_steps=1 max_steps=8 output_dir=" + dir + "/each");
  ASSERT_EQ(each.exit_code, 0) << each.err;
  auto means = train(1, base + " gradient_accumulation_steps=2 calculate_per_token_loss=false output_dir=" + dir +
                            "/means");
  ASSERT_EQ(means.exit_code, 0) << means.err;
  auto tokens = train(1, base + " gradient_accumulation_steps=2 calculate_per_token_loss=true output_dir=" + dir +
                             "/tokens");
  ASSERT_EQ(tokens.exit_code, 0) << tokens.err;
  const auto e = testing::logged_figures(dir + "/each"), m = testing::logged_figures(dir + "/means"),
             t = testing::logged_figures(dir + "/tokens");
  ASSERT_EQ(e.size(), 8u);
  ASSERT_EQ(m.size(), 4u);
  ASSERT_EQ(t.size(), 4u);
  double largest_gap = 0;
  for (size_t i = 0; i < 4; ++i) {
    const double mean_of_means = (e[2 * i].first + e[2 * i + 1].first) / 2;
    EXPECT_NEAR(m[i].first, mean_of_means, 1.5e-4) << "step " << i + 1;
    largest_gap = std::max(largest_gap, std::abs(t[i].first - mean_of_means));
  }
  // The token-weighted loss is another figure wherever a group's micro-batches differ in length.
  EXPECT_GT(largest_gap, 1e-3);
}

}  // namespace
}  // namespace unillm
