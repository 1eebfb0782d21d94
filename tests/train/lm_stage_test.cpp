// Stage sft's loss normalisation on a tiny random model: token-weighted over the step by default
// (micro_weight 1 / the step's scored tokens, a micro-batch's summed loss), and under
// micro_batch_mean_loss (Megatron's calculate_per_token_loss: false) the mean of each
// micro-batch's mean: micro_weight 1 / the micro-batches, train_micro's loss and gradient its own
// mean (the summed loss over its scored tokens).
#include <gtest/gtest.h>

#include <cmath>

#include "data/batch_loader.h"
#include "models/causal_lm.h"
#include "support/expect.h"
#include "padded_rows_util.h"
#include "tiny_llama_util.h"
#include "train/stages/stage.h"

namespace unillm::train {
namespace {

// Rows of 7 tokens with the first 3 unscored and right padding (id 0): 4 + 2 scored labels.
data::Batch rows() { return testing::padded_rows({{1, 5, 6, 7, 8, 9, 10}, {1, 11, 12, 13, 14, 0, 0}}, 3); }

double grad_norm2(models::CausalLM& m) {
  double n = 0;
  for (auto& [name, t] : m.module().named_adapter_parameters("default", true))
    for (float g : t.contiguous().to_float_vector()) n += double(g) * g;
  return n;
}

TEST(LmStage, MicroBatchMeanLossAveragesEachMicroBatchsMean) {
  testing::init_cpu();
  TrainArgs tokens;
  tokens.stage = "sft";
  TrainArgs means = tokens;
  means.micro_batch_mean_loss = true;
  auto by_tokens = make_stage(tokens), by_means = make_stage(means);
  data::Batch one_row = rows();
  one_row.rows = 1;
  one_row.input_ids.resize(7), one_row.labels.resize(7), one_row.lengths.resize(1), one_row.row_indices.resize(1);
  const std::vector<data::Batch> group = {rows(), one_row};  // 6 + 4 scored labels
  EXPECT_DOUBLE_EQ(by_tokens->micro_weight(group), 1.0 / 10);
  EXPECT_DOUBLE_EQ(by_means->micro_weight(group), 1.0 / 2);

  MicroOptions o;
  o.seed = 1;
  auto m0 = testing::tiny_llama("lm_stage0", 2, true), m1 = testing::tiny_llama("lm_stage1", 2, true);
  const MicroResult summed = by_tokens->train_micro(*m0, rows(), o);
  const MicroResult mean = by_means->train_micro(*m1, rows(), o);
  EXPECT_GT(summed.loss, 0.0);
  EXPECT_NEAR(mean.loss, summed.loss / 6, 1e-6 * summed.loss);
  EXPECT_GT(grad_norm2(*m0), 0.0);
  EXPECT_NEAR(grad_norm2(*m1), grad_norm2(*m0) / 36, 1e-5 * grad_norm2(*m1));
  // The mean is the token mean of the row's cross-entropies: ln 40 ≈ 3.69 for a model this random.
  EXPECT_GT(mean.loss, 2.5);
  EXPECT_LT(mean.loss, 5.0);
}

// LLaMA-Factory v1's dynamic_padding_free packs a micro-batch into one row (segments, restarted
// positions): the same summed loss and gradients as the rows padded side by side.
TEST(LmStage, PackedMicroBatchTrainsAsItsPaddedRows) {
  testing::init_cpu();
  data::TokenizedDataset d;
  d.rows = {{1, 5, 6, 7, 8, 9}, {1, 11, 12, 13}, {1, 20, 21, 22, 23, 24, 25, 26}};
  d.labels = {{-100, -100, 6, 7, 8, 9}, {-100, 11, 12, 13}, {-100, -100, -100, 23, 24, 25, 26, 3}};
  data::LoaderOptions padded;
  padded.shuffle = false;
  padded.token_budget = 1000;
  data::LoaderOptions packed = padded;
  packed.budget_by_sum = true;
  const data::Batch a = data::BatchLoader(d, padded).next(), b = data::BatchLoader(d, packed).next();
  ASSERT_EQ(a.rows, 3);
  ASSERT_EQ(b.rows, 1);
  TrainArgs args;
  args.stage = "sft";
  auto stage = make_stage(args);
  MicroOptions o;
  o.seed = 1;
  auto m0 = testing::tiny_llama("lm_stage_pad", 2, true), m1 = testing::tiny_llama("lm_stage_pack", 2, true);
  const MicroResult ra = stage->train_micro(*m0, a, o), rb = stage->train_micro(*m1, b, o);
  EXPECT_GT(ra.loss, 0.0);
  EXPECT_NEAR(rb.loss, ra.loss, 1e-5 * ra.loss);
  EXPECT_NEAR(grad_norm2(*m1), grad_norm2(*m0), 1e-5 * grad_norm2(*m0));
}

}  // namespace
}  // namespace unillm::train
