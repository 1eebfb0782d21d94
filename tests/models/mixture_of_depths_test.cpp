// The mixture-of-depth package's capacity schedule and token choice (models/mixture_of_depths.h),
// against its Python written out by hand: `training_step += 1 if training_step < 1000 else 999`,
// `capacity = 0.125 + (1 - 0.125) * (1. / training_step)`, `k = max(1, int(capacity * s))`,
// `weights > topk(weights, k)[-1]` (>= when k is 1).
#include <gtest/gtest.h>

#include <vector>

#include "models/mixture_of_depths.h"

namespace unillm::models {
namespace {

TEST(MixtureOfDepthsRule, CapacityFollowsThePackagesCounter) {
  EXPECT_EQ(mod_capacity(0), 0.125);  // before any training forward
  EXPECT_EQ(mod_capacity(1), 1.0);
  EXPECT_EQ(mod_capacity(2), 0.5625);
  EXPECT_DOUBLE_EQ(mod_capacity(7), 0.125 + 0.875 / 7);
  int64_t calls = 0;
  for (int i = 0; i < 1000; ++i) calls = mod_next_calls(calls);
  EXPECT_EQ(calls, 1000);
  EXPECT_EQ(mod_next_calls(calls), 1999);  // the package's `else 999`
  EXPECT_EQ(mod_next_calls(1999), 2998);
  // int(capacity * s) truncates: 0.5625 · 24 = 13.5 -> 13; never below one token.
  EXPECT_EQ(mod_tokens(0.5625, 24), 13);
  EXPECT_EQ(mod_tokens(1.0, 24), 24);
  EXPECT_EQ(mod_tokens(0.125, 7), 1);
  EXPECT_EQ(mod_tokens(0.125, 0), 1);
}

TEST(MixtureOfDepthsRule, KeepsTokensAboveTheKthLargestScore) {
  const std::vector<float> w = {0.3f, -1.0f, 2.0f, 0.3f, 0.9f, 0.1f};
  // k = 3: the third largest is 0.3 (twice), strictly above it only 2.0 and 0.9.
  EXPECT_EQ(mod_select(w.data(), 6, 3), (std::vector<int32_t>{2, 4}));
  // k = 6 (capacity 1): all but the smallest.
  EXPECT_EQ(mod_select(w.data(), 6, 6), (std::vector<int32_t>{0, 2, 3, 4, 5}));
  // k = 1: at or above the largest.
  EXPECT_EQ(mod_select(w.data(), 6, 1), (std::vector<int32_t>{2}));
  const std::vector<float> tied = {0.5f, 0.5f, 0.5f};
  EXPECT_EQ(mod_select(tied.data(), 3, 2), (std::vector<int32_t>{}));  // the package routes none
  EXPECT_EQ(mod_select(tied.data(), 3, 1), (std::vector<int32_t>{0, 1, 2}));
}

}  // namespace
}  // namespace unillm::models
