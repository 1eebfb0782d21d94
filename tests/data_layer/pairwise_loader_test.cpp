// The batch loader over grouped (pairwise) data: examples are permuted and batched, each batch
// lays out the chosen rows of its examples then their rejected rows (LLaMA-Factory's
// PairwiseDataCollator), pairs never straddle batches, and resume works in example batches.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "core/error.h"
#include "data/batch_loader.h"
#include "data/error.h"

namespace unillm::data {
namespace {

// n examples; example e's chosen row is {100e+1, …} of length 1 + e % 3, its rejected row
// {100e+2, …} of length 2 + e % 2; labels mask the first id.
TokenizedDataset pairs(int64_t n) {
  TokenizedDataset d;
  d.group = 2;
  for (int64_t e = 0; e < n; ++e) {
    for (int64_t k = 0; k < 2; ++k) {
      const int64_t len = k == 0 ? 1 + e % 3 : 2 + e % 2;
      std::vector<int32_t> row(len, static_cast<int32_t>(100 * e + 1 + k));
      std::vector<int32_t> lab = row;
      lab[0] = kIgnoreIndex;
      d.rows.push_back(row);
      d.labels.push_back(lab);
    }
  }
  return d;
}

// The (example, member) of every row of a batch, from its first id.
std::vector<std::pair<int64_t, int64_t>> members(const Batch& b) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int64_t i = 0; i < b.rows; ++i) {
    const int32_t id = b.input_ids[i * b.seq_len];
    out.push_back({id / 100, id % 100 - 1});
  }
  return out;
}

TEST(PairwiseLoader, ChosenBlockThenRejectedBlockInDatasetOrder) {
  TokenizedDataset d = pairs(5);
  LoaderOptions o;
  o.batch_size = 2;  // examples
  o.shuffle = false;
  o.pad_id = 0;
  BatchLoader loader(d, o);
  EXPECT_EQ(loader.batches_per_epoch(), 3);
  Batch b = loader.next();
  EXPECT_EQ(b.group, 2);
  EXPECT_EQ(b.rows, 4);
  EXPECT_EQ(b.row_indices, (std::vector<int64_t>{0, 2, 1, 3}));
  using M = std::vector<std::pair<int64_t, int64_t>>;
  EXPECT_EQ(members(b), (M{{0, 0}, {1, 0}, {0, 1}, {1, 1}}));
  EXPECT_EQ(b.seq_len, 3);  // the longest of the four rows
  EXPECT_EQ(b.lengths, (std::vector<int32_t>{1, 2, 2, 3}));
  // Row 0 (example 0 chosen, length 1) then padding; labels from the dataset, pads ignored.
  EXPECT_EQ(std::vector<int32_t>(b.labels.begin(), b.labels.begin() + 3),
            (std::vector<int32_t>{kIgnoreIndex, kIgnoreIndex, kIgnoreIndex}));
  EXPECT_EQ(std::vector<int32_t>(b.labels.begin() + 9, b.labels.end()),
            (std::vector<int32_t>{kIgnoreIndex, 102, 102}));
  EXPECT_EQ(loader.next().row_indices, (std::vector<int64_t>{4, 6, 5, 7}));
  Batch last = loader.next();  // the partial batch is kept: one example, two rows
  EXPECT_EQ(last.row_indices, (std::vector<int64_t>{8, 9}));
  EXPECT_EQ(loader.state(), (LoaderState{1, 0}));
}

TEST(PairwiseLoader, ShufflesExamplesWithTheDocumentedPermutation) {
  const int64_t n = 11;
  TokenizedDataset d = pairs(n);
  TokenizedDataset single;  // n rows: the row loader's permutation of n items
  for (int64_t i = 0; i < n; ++i) single.rows.push_back({static_cast<int32_t>(i + 1)});
  LoaderOptions o;
  o.batch_size = 3;
  o.seed = 1234;
  BatchLoader loader(d, o), rows_loader(single, o);
  EXPECT_EQ(loader.batches_per_epoch(), 4);
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    const std::vector<int64_t> order = loader.epoch_order(epoch);
    EXPECT_EQ(order, rows_loader.epoch_order(epoch));  // the same Fisher–Yates over n
    std::vector<int64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(sorted[i], i);
    std::set<int64_t> seen;
    for (int64_t bi = 0; bi < loader.batches_per_epoch(); ++bi) {
      Batch b = loader.next();
      const int64_t B = b.rows / 2;
      std::vector<int64_t> expect(order.begin() + bi * 3,
                                  order.begin() + std::min<int64_t>(n, bi * 3 + 3));
      ASSERT_EQ(B, static_cast<int64_t>(expect.size()));
      for (int64_t i = 0; i < B; ++i) {  // both rows of every example, in the batch layout
        EXPECT_EQ(b.row_indices[i], 2 * expect[i]);
        EXPECT_EQ(b.row_indices[B + i], 2 * expect[i] + 1);
        EXPECT_TRUE(seen.insert(expect[i]).second);
      }
    }
    EXPECT_EQ(static_cast<int64_t>(seen.size()), n);  // every example once per epoch
  }
  EXPECT_NE(loader.epoch_order(0), loader.epoch_order(1));
  BatchLoader again(d, o);  // deterministic
  EXPECT_EQ(again.next().row_indices, BatchLoader(d, o).next().row_indices);
}

TEST(PairwiseLoader, ResumesAtAnExampleBatch) {
  TokenizedDataset d = pairs(7);
  LoaderOptions o;
  o.batch_size = 2;
  o.seed = 5;
  BatchLoader loader(d, o);
  std::vector<Batch> run;
  for (int i = 0; i < 9; ++i) run.push_back(loader.next());  // 4 per epoch: into epoch 2
  BatchLoader resumed(d, o);
  resumed.restore({1, 2});
  for (int i = 6; i < 9; ++i) {
    Batch b = resumed.next();
    EXPECT_EQ(b.row_indices, run[i].row_indices);
    EXPECT_EQ(b.input_ids, run[i].input_ids);
    EXPECT_EQ(b.labels, run[i].labels);
  }
  EXPECT_EQ(resumed.state(), loader.state());
  EXPECT_THROW(resumed.restore({0, 4}), ConfigError);  // 4 example batches: 0..3
}

TEST(PairwiseLoader, GroupRowsAndMakeBatchForEvaluation) {
  TokenizedDataset d = pairs(4);
  EXPECT_EQ(d.num_examples(), 4);
  EXPECT_EQ(group_rows(d, 1, 2), (std::vector<int64_t>{2, 4, 3, 5}));
  EXPECT_EQ(group_rows(d, 0, 0), (std::vector<int64_t>{}));
  EXPECT_THROW(group_rows(d, 3, 2), ConfigError);
  EXPECT_THROW(group_rows(d, -1, 1), ConfigError);
  LoaderOptions o;
  Batch b = make_batch(d, group_rows(d, 2, 2), o);
  EXPECT_EQ(b.group, 2);
  using M = std::vector<std::pair<int64_t, int64_t>>;
  EXPECT_EQ(members(b), (M{{2, 0}, {3, 0}, {2, 1}, {3, 1}}));
  // Rows of grouped data in another layout are refused: a pair would be taken apart.
  EXPECT_THROW(make_batch(d, {0, 1, 2, 3}, o), ConfigError);
  EXPECT_THROW(make_batch(d, {0}, o), ConfigError);
  EXPECT_THROW(make_batch(d, {1, 2}, o), ConfigError);
  // Ungrouped data: group_rows is the identity range and make_batch takes any rows.
  TokenizedDataset single;
  for (int i = 0; i < 3; ++i) single.rows.push_back({i + 1});
  EXPECT_EQ(group_rows(single, 1, 2), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(make_batch(single, {2, 0}, o).group, 1);
}

TEST(PairwiseLoader, RefusesBrokenGroups) {
  TokenizedDataset d = pairs(2);
  d.rows.pop_back();
  d.labels.pop_back();
  EXPECT_THROW(BatchLoader(d, LoaderOptions{}), DataError);
  TokenizedDataset g3 = pairs(3);
  g3.group = 3;
  EXPECT_THROW(BatchLoader(g3, LoaderOptions{}), ConfigError);
}

}  // namespace
}  // namespace unillm::data
