// mix_datasets against the examples of HF datasets' interleave_datasets (no probabilities): sizes
// 3, 4, 5 as global indices 0-2, 3-6, 7-11.
#include "data/mix.h"

#include <gtest/gtest.h>

namespace unillm::data {
namespace {

std::vector<std::vector<int>> three() { return {{0, 1, 2}, {3, 4, 5, 6}, {7, 8, 9, 10, 11}}; }

TEST(MixDatasets, ConcatAndHfInterleaving) {
  EXPECT_EQ(mix_datasets(three(), "concat"), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(mix_datasets(three(), "interleave_under"), (std::vector<int>{0, 3, 7, 1, 4, 8, 2, 5, 9}));
  EXPECT_EQ(mix_datasets(three(), "interleave_over"),
            (std::vector<int>{0, 3, 7, 1, 4, 8, 2, 5, 9, 0, 6, 10, 1, 3, 11}));
  EXPECT_EQ(mix_datasets(std::vector<std::vector<int>>{{1, 2}}, "interleave_over"), (std::vector<int>{1, 2}));
  // An empty dataset leaves nothing under first_exhausted and is skipped under all_exhausted.
  EXPECT_TRUE(mix_datasets(std::vector<std::vector<int>>{{1, 2}, {}}, "interleave_under").empty());
  EXPECT_EQ(mix_datasets(std::vector<std::vector<int>>{{1, 2}, {}}, "interleave_over"), (std::vector<int>{1, 2}));
}

}  // namespace
}  // namespace unillm::data
