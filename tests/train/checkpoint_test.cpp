// Checkpoint rotation with a best checkpoint (HF's _sorted_checkpoints + _rotate_checkpoints),
// against hand-worked cases.
#include "train/checkpoint.h"

#include <gtest/gtest.h>

namespace unillm::train {
namespace {

using Steps = std::vector<int64_t>;

TEST(Checkpoint, RotationKeepsTheNewestWithoutABest) {
  EXPECT_EQ(checkpoints_to_remove({1, 2, 3, 4}, -1, 2), (Steps{1, 2}));
  EXPECT_EQ(checkpoints_to_remove({1, 2, 3, 4}, -1, 0), Steps{});  // no limit
  EXPECT_EQ(checkpoints_to_remove({1, 2}, -1, 2), Steps{});
}

TEST(Checkpoint, RotationNeverRemovesTheBest) {
  // Best 1 moves before the newest: [2, 3, 1, 4]; limit 2 removes the first two.
  EXPECT_EQ(checkpoints_to_remove({1, 2, 3, 4}, 1, 2), (Steps{2, 3}));
  EXPECT_EQ(checkpoints_to_remove({1, 2, 3, 4}, 2, 3), (Steps{1}));
  // Limit 1 with a best that is not the newest keeps two: the best and the newest.
  EXPECT_EQ(checkpoints_to_remove({1, 2, 3, 4}, 1, 1), (Steps{2, 3}));
  EXPECT_EQ(checkpoints_to_remove({1, 2, 3, 4}, 3, 1), (Steps{1, 2}));
  // The newest is the best: plain rotation.
  EXPECT_EQ(checkpoints_to_remove({1, 2, 3, 4}, 4, 1), (Steps{1, 2, 3}));
  // A best that is not among them (the final output_dir) changes nothing.
  EXPECT_EQ(checkpoints_to_remove({1, 2, 3}, 9, 1), (Steps{1, 2}));
}

}  // namespace
}  // namespace unillm::train
