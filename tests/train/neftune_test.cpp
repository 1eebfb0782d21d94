// NEFTune (HF's neftune_noise_alpha): the noise's range and per-row streams, and a training
// forward's hidden states against the embedding plus that noise normalised by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "models/causal_lm.h"
#include "tiny_llama_util.h"

namespace unillm::models {
namespace {

TrainBatch batch(int64_t rows, int64_t cols, double alpha) {
  std::vector<int32_t> ids, pos;
  for (int64_t i = 0; i < rows * cols; ++i) {
    ids.push_back(static_cast<int32_t>((7 * i + 3) % 40));
    pos.push_back(static_cast<int32_t>(i % cols));
  }
  TrainBatch b;
  b.input_ids = Tensor::from_ints(ids, {rows, cols});
  b.position_ids = Tensor::from_ints(pos, {rows, cols});
  b.labels = b.input_ids;
  b.neftune_alpha = alpha;
  b.neftune_seed = 11;
  return b;
}

// Uniform in ±alpha / sqrt(T·C): within the bound, mean ~0, variance ~bound² / 3; rows drawn for
// a slice are the same rows of the whole (sequence parallelism), and another seed differs.
TEST(Neftune, NoiseIsUniformInItsRangeAndPerRow) {
  testing::init_cpu();
  const TrainBatch b = batch(4, 64, 5.0);
  const int64_t C = 48;
  const double mag = 5.0 / std::sqrt(64.0 * 48.0);
  const Tensor all = neftune_noise(b, 0, 256, C);
  double sum = 0, sq = 0, peak = 0;
  for (int64_t i = 0; i < all.numel(); ++i) {
    const double v = all.item_flat(i);
    sum += v, sq += v * v, peak = std::max(peak, std::fabs(v));
  }
  const double n = static_cast<double>(all.numel());
  EXPECT_LE(peak, mag);
  EXPECT_GT(peak, 0.99 * mag);
  EXPECT_NEAR(sum / n, 0.0, 0.02 * mag);
  EXPECT_NEAR(sq / n, mag * mag / 3, 0.03 * mag * mag / 3);
  const Tensor part = neftune_noise(b, 100, 130, C);
  for (int64_t r = 0; r < 30; ++r)
    for (int64_t c = 0; c < C; ++c) ASSERT_EQ(part.item({r, c}), all.item({100 + r, c}));
  TrainBatch other = b;
  other.neftune_seed = 12;
  EXPECT_NE(neftune_noise(other, 0, 1, C).item({0, 0}), all.item({0, 0}));
}

// The noise enters at the embedding: a training forward with NEFTune gives the hidden states of
// the same model whose embedding rows of the batch's (distinct) tokens hold row + noise.
TEST(Neftune, TrainingForwardAddsTheNoiseToTheEmbedding) {
  auto m = testing::tiny_llama("neftune", 1, false);
  auto folded = testing::tiny_llama("neftune_folded", 1, false);
  const TrainBatch b = batch(2, 5, 3.0);  // ids 3, 10, 17, … : ten distinct tokens
  const Tensor noise = neftune_noise(b, 0, 10, 16);
  Tensor emb;
  for (const auto& [name, t] : folded->named_parameters())
    if (name == "model.embed_tokens.weight") emb = t;
  ASSERT_TRUE(emb.defined());
  float* e = emb.data<float>();
  for (int64_t r = 0; r < 10; ++r) {
    const auto id = static_cast<int64_t>(b.input_ids.item_flat(r));
    for (int64_t c = 0; c < 16; ++c) e[id * 16 + c] += noise.data<float>()[r * 16 + c];
  }
  TrainBatch off = b;
  off.neftune_alpha = 0;
  const Tensor got = m->hidden_states(b, false), want = folded->hidden_states(off, false);
  const Tensor plain = m->hidden_states(off, false);
  double moved = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    EXPECT_NEAR(got.item_flat(i), want.item_flat(i), 1e-6) << i;
    moved = std::max(moved, std::fabs(static_cast<double>(got.item_flat(i)) - plain.item_flat(i)));
  }
  EXPECT_GT(moved, 1e-3);  // the noise is not negligible here: the comparison can fail
}

}  // namespace
}  // namespace unillm::models
