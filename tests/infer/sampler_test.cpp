// Logits processors against hand-computed distributions (HF definitions), and the draw.
#include "infer/sampler.h"

#include <gtest/gtest.h>

#include <cmath>

namespace unillm::infer {
namespace {

std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

void expect_dist(const std::vector<float>& scores, const std::vector<double>& expected) {
  std::vector<double> p = softmax(scores);
  ASSERT_EQ(p.size(), expected.size());
  for (size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(p[i], expected[i], 1e-6) << "token " << i;
}

TEST(Sampler, RepetitionPenaltyDividesPositiveMultipliesNegative) {
  std::vector<float> s{2.0f, -1.0f, 0.5f};
  apply_repetition_penalty(s, {0, 1, 1}, 2.0f);
  EXPECT_FLOAT_EQ(s[0], 1.0f);
  EXPECT_FLOAT_EQ(s[1], -2.0f);
  EXPECT_FLOAT_EQ(s[2], 0.5f);  // not in context
}

TEST(Sampler, TemperatureSharpensAndFlattens) {
  std::vector<float> s = logits_of({0.5, 0.3, 0.15, 0.05});
  apply_temperature(s, 2.0f);
  double z = std::sqrt(0.5) + std::sqrt(0.3) + std::sqrt(0.15) + std::sqrt(0.05);
  expect_dist(s, {std::sqrt(0.5) / z, std::sqrt(0.3) / z, std::sqrt(0.15) / z, std::sqrt(0.05) / z});
}

TEST(Sampler, TopKKeepsKHighest) {
  std::vector<float> s = logits_of({0.5, 0.3, 0.15, 0.05});
  apply_top_k(s, 3);
  expect_dist(s, {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0.0});
  std::vector<float> ties{1, 1, 1, 0};
  apply_top_k(ties, 2);  // ties with the k-th are kept, as HF's `scores < kth` removes
  EXPECT_TRUE(std::isfinite(ties[2]));
  EXPECT_TRUE(std::isinf(ties[3]));
}

TEST(Sampler, TopPRemovesTailUpToOneMinusP) {
  std::vector<float> s = logits_of({0.5, 0.3, 0.15, 0.05});
  apply_top_p(s, 0.75f);  // ascending cumsum 0.05, 0.20 <= 0.25 removed; 0.50 kept
  expect_dist(s, {0.625, 0.375, 0.0, 0.0});
  std::vector<float> one = logits_of({0.9, 0.1});
  apply_top_p(one, 0.01f);  // the top token always survives
  expect_dist(one, {1.0, 0.0});
}

TEST(Sampler, MinPScalesWithTopProbability) {
  std::vector<float> s = logits_of({0.5, 0.3, 0.15, 0.05});
  apply_min_p(s, 0.4f);  // threshold 0.2
  expect_dist(s, {0.625, 0.375, 0.0, 0.0});
}

TEST(Sampler, ProcessorOrderIsHfs) {
  // temperature before top-p: at T=0.5, probs ∝ p², so 0.5² / Σ = 0.25 / 0.365 = 0.685;
  // top_p 0.6 then keeps only the top token. top-p first would have kept two tokens.
  SamplingParams params;
  params.temperature = 0.5f;
  params.top_p = 0.6f;
  std::vector<float> s = process_logits(logits_of({0.5, 0.3, 0.15, 0.05}), params, {});
  expect_dist(s, {1.0, 0.0, 0.0, 0.0});
}

TEST(Sampler, GreedyIsArgmaxAfterPenalty) {
  SamplingParams params;
  params.temperature = 0.0f;
  params.repetition_penalty = 3.0f;
  Rng rng(1);
  EXPECT_EQ(sample_token({1.0f, 2.0f, 0.9f}, params, {}, rng), 1);
  EXPECT_EQ(sample_token({1.0f, 2.0f, 0.9f}, params, {1}, rng), 0);  // 2/3 < 1
}

TEST(Sampler, PresenceAndFrequencyPenaltiesCountGeneratedTokensOnly) {
  std::vector<float> s{2.0f, -1.0f, 0.5f, 1.0f};
  const std::vector<int32_t> gen{0, 0, 2};
  apply_presence_frequency(s, gen.data(), gen.size(), 0.5f, 0.25f);
  EXPECT_FLOAT_EQ(s[0], 2.0f - 0.5f - 0.5f);  // generated twice
  EXPECT_FLOAT_EQ(s[1], -1.0f);
  EXPECT_FLOAT_EQ(s[2], 0.5f - 0.5f - 0.25f);
  EXPECT_FLOAT_EQ(s[3], 1.0f);
  SamplingParams params;
  params.temperature = 0.0f;
  params.presence_penalty = 2.0f;
  Rng rng(1);
  // Token 1 is in the prompt only (context[0..2) with prompt_len 2): not penalised.
  EXPECT_EQ(sample_token({1.0f, 2.0f, 0.9f}, params, {1, 1}, rng, 2), 1);
  EXPECT_EQ(sample_token({1.0f, 2.0f, 0.9f}, params, {1, 1, 1}, rng, 2), 0);  // 2 - 2 < 1
}

TEST(Sampler, DrawsFollowTheDistribution) {
  SamplingParams params;
  Rng rng(123);
  std::vector<double> p{0.5, 0.3, 0.15, 0.05};
  std::vector<int> counts(4, 0);
  const int n = 40000;
  for (int i = 0; i < n; ++i) ++counts[sample_token(logits_of(p), params, {}, rng)];
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(counts[i] / double(n), p[i], 0.01) << "token " << i;
}

}  // namespace
}  // namespace unillm::infer
