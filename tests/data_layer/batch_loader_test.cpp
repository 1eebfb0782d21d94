// BatchLoader: padding and labels, per-row labels/positions/segments, the documented
// permutation, determinism, exact resume.
#include "data/batch_loader.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
#include "core/rng.h"
#include "data/error.h"

namespace unillm::data {
namespace {

TokenizedDataset make_rows(int n) {
  TokenizedDataset d;
  for (int i = 0; i < n; ++i) d.rows.push_back(std::vector<int32_t>(1 + i % 4, 100 + i));
  return d;
}

TEST(BatchLoader, PadsToTheLongestRowWithIgnoredLabels) {
  TokenizedDataset d;
  d.rows = {{5, 6, 7}, {8}};
  LoaderOptions o;
  o.batch_size = 2;
  o.shuffle = false;
  o.pad_id = 0;
  BatchLoader loader(d, o);
  Batch b = loader.next();
  EXPECT_EQ(b.rows, 2);
  EXPECT_EQ(b.seq_len, 3);
  EXPECT_EQ(b.input_ids, (std::vector<int32_t>{5, 6, 7, 8, 0, 0}));
  EXPECT_EQ(b.labels, (std::vector<int32_t>{5, 6, 7, 8, -100, -100}));
  EXPECT_EQ(b.lengths, (std::vector<int32_t>{3, 1}));
  EXPECT_EQ(b.num_label_tokens(), 4);
  o.mask_label_id = 6;  // HF's collator masking pad (= eos) ids
  EXPECT_EQ(make_batch(d, {0}, o).labels, (std::vector<int32_t>{5, -100, 7}));
}

// HF collators' pad_to_multiple_of (shift_attn's batches): the length rounds up, the padding as
// above; an exact multiple stays.
TEST(BatchLoader, PadsToAMultipleWhenAsked) {
  TokenizedDataset d;
  d.rows = {{5, 6, 7}, {8}, {1, 2, 3, 4, 5, 6, 7, 8}};
  LoaderOptions o;
  o.pad_to_multiple_of = 8;
  Batch b = make_batch(d, {0, 1}, o);
  EXPECT_EQ(b.seq_len, 8);
  EXPECT_EQ(b.input_ids, (std::vector<int32_t>{5, 6, 7, 0, 0, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(b.num_label_tokens(), 4);
  EXPECT_EQ(b.lengths, (std::vector<int32_t>{3, 1}));
  EXPECT_EQ(make_batch(d, {2}, o).seq_len, 8);
  o.pad_to_multiple_of = 4;
  EXPECT_EQ(make_batch(d, {0, 1}, o).seq_len, 4);
}

TEST(BatchLoader, UsesDatasetLabelsAndPadsPositionsAndSegmentsHarmlessly) {
  TokenizedDataset d;
  d.rows = {{5, 6, 7}, {8}};
  d.labels = {{-100, 6, 7}, {8}};
  d.position_ids = {{0, 1, 0}, {4}};
  d.segment_ids = {{1, 1, 2}, {1}};
  LoaderOptions o;
  o.pad_id = 3;
  o.mask_label_id = 7;  // only for datasets without labels
  Batch b = make_batch(d, {1, 0}, o);
  EXPECT_EQ(b.seq_len, 3);
  EXPECT_EQ(b.input_ids, (std::vector<int32_t>{8, 3, 3, 5, 6, 7}));
  EXPECT_EQ(b.labels, (std::vector<int32_t>{8, -100, -100, -100, 6, 7}));
  EXPECT_EQ(b.position_ids, (std::vector<int32_t>{4, 5, 6, 0, 1, 0}));  // pads continue
  EXPECT_EQ(b.segment_ids, (std::vector<int32_t>{1, 0, 0, 1, 1, 2}));   // pads: segment 0
  EXPECT_EQ(b.lengths, (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(b.num_label_tokens(), 3);

  // Only the fields a dataset has are filled.
  d.position_ids.clear();
  d.segment_ids.clear();
  Batch c = make_batch(d, {0, 1}, o);
  EXPECT_TRUE(c.position_ids.empty());
  EXPECT_TRUE(c.segment_ids.empty());
  EXPECT_EQ(c.labels, (std::vector<int32_t>{-100, 6, 7, 8, -100, -100}));
}

TEST(BatchLoader, RejectsPerRowFieldsOfTheWrongShape) {
  TokenizedDataset d;
  d.rows = {{5, 6, 7}, {8}};
  d.labels = {{1, 2, 3}};  // one row of labels for two rows
  LoaderOptions o;
  EXPECT_THROW(BatchLoader(d, o), DataError);
  d.labels = {{1, 2, 3}, {4, 5}};  // row 1 has 1 id, 2 labels
  EXPECT_THROW(BatchLoader(d, o), DataError);
  EXPECT_NO_THROW(make_batch(d, {0}, o));  // only the selected rows are checked
  EXPECT_THROW(make_batch(d, {1}, o), DataError);
  d.labels.clear();
  d.segment_ids = {{1, 1, 1}, {}};
  EXPECT_THROW(BatchLoader(d, o), DataError);
  EXPECT_THROW(make_batch(d, {2}, o), ConfigError);  // no row 2
}

TEST(BatchLoader, KeepsTheLastPartialBatchAndMovesToTheNextEpoch) {
  TokenizedDataset d = make_rows(5);
  LoaderOptions o;
  o.batch_size = 2;
  BatchLoader loader(d, o);
  EXPECT_EQ(loader.batches_per_epoch(), 3);
  std::vector<int64_t> seen;
  for (int i = 0; i < 3; ++i)
    for (int64_t r : loader.next().row_indices) seen.push_back(r);
  EXPECT_EQ(seen, loader.epoch_order(0));
  EXPECT_EQ(loader.state(), (LoaderState{1, 0}));
  EXPECT_NE(loader.epoch_order(0), loader.epoch_order(1));
}

TEST(BatchLoader, PermutationIsTheDocumentedFisherYates) {
  TokenizedDataset d = make_rows(6);
  LoaderOptions o;
  o.seed = 7;
  BatchLoader loader(d, o);
  // Independent re-statement of the contract in batch_loader.h.
  std::vector<int64_t> a = {0, 1, 2, 3, 4, 5};
  Rng rng(7 + 0x9E3779B97F4A7C15ULL * 3);  // epoch 2
  for (int64_t i = 5; i >= 1; --i) {
    uint64_t bound = i + 1, threshold = (0 - bound) % bound, r;
    do r = rng.next_u64();
    while (r < threshold);
    std::swap(a[i], a[r % bound]);
  }
  EXPECT_EQ(loader.epoch_order(2), a);
  o.shuffle = false;
  EXPECT_EQ(BatchLoader(d, o).epoch_order(2), (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
}

TEST(BatchLoader, SameSeedSameBatchesAndExactResume) {
  TokenizedDataset d = make_rows(11);
  LoaderOptions o;
  o.batch_size = 3;
  o.seed = 123;
  BatchLoader a(d, o), b(d, o);
  std::vector<Batch> straight;
  for (int i = 0; i < 10; ++i) straight.push_back(a.next());
  for (int i = 0; i < 10; ++i) EXPECT_EQ(b.next().row_indices, straight[i].row_indices);
  for (int k : {0, 1, 3, 4, 7}) {
    BatchLoader first(d, o);
    for (int i = 0; i < k; ++i) first.next();
    LoaderState saved = first.state();
    BatchLoader resumed(d, o);
    resumed.restore(saved);
    for (int i = k; i < 10; ++i) {
      Batch x = resumed.next();
      EXPECT_EQ(x.row_indices, straight[i].row_indices) << "k=" << k << " i=" << i;
      EXPECT_EQ(x.input_ids, straight[i].input_ids);
    }
  }
  BatchLoader c(d, o);
  EXPECT_THROW(c.restore({0, 4}), ConfigError);  // 4 batches per epoch: 0..3
}

// group_by_length (HF's get_length_grouped_indices): the shuffled order cut into megabatches of
// min(n / (4 · length_group), 50) · length_group = 2 · 3 examples here, each sorted longest first
// (stable: ties keep the shuffled order), and the longest example of all moved to the front.
TEST(BatchLoader, GroupByLengthSortsMegabatchesOfTheShuffledOrder) {
  TokenizedDataset d;
  for (int i = 0; i < 29; ++i) d.rows.push_back(std::vector<int32_t>(1 + (i * 7) % 11, i));
  LoaderOptions o;
  o.seed = 5;
  const std::vector<int64_t> shuffled = BatchLoader(d, o).epoch_order(1);
  o.length_group = 3;
  const std::vector<int64_t> grouped = BatchLoader(d, o).epoch_order(1);
  auto len = [&](int64_t r) { return static_cast<int64_t>(d.rows[static_cast<size_t>(r)].size()); };
  std::vector<int64_t> want = shuffled;
  int64_t best = 0;
  for (size_t b = 0; b < want.size(); b += 6) {
    std::stable_sort(want.begin() + static_cast<int64_t>(b), want.begin() + static_cast<int64_t>(std::min(want.size(), b + 6)),
                     [&](int64_t x, int64_t y) { return len(x) > len(y); });
    if (len(want[b]) > len(want[static_cast<size_t>(best)])) best = static_cast<int64_t>(b);
  }
  std::swap(want[0], want[static_cast<size_t>(best)]);
  EXPECT_EQ(grouped, want);
  EXPECT_EQ(len(grouped[0]), 11);  // the longest row leads
  for (size_t b = 6; b + 1 < grouped.size(); ++b)
    if (b % 6 != 5) EXPECT_GE(len(grouped[b]), len(grouped[b + 1])) << b;  // within a megabatch
  EXPECT_NE(grouped, BatchLoader(d, o).epoch_order(2));  // each epoch its own shuffle
  o.shuffle = false;  // disable_shuffling wins: dataset order
  const std::vector<int64_t> plain = BatchLoader(d, o).epoch_order(1);
  for (int64_t i = 0; i < 29; ++i) EXPECT_EQ(plain[static_cast<size_t>(i)], i);
}

}  // namespace
}  // namespace unillm::data

namespace unillm::data {
namespace {

// LLaMA-Factory v1's dynamic batching, cut by hand from its _get_dynamic_micro_batch_sizes and
// _get_dynamic_padding_free_micro_batch_sizes on rows of 3, 5, 2, 7, 1, 1, 4 tokens with a budget
// of 10: padded (rows × longest) [3 5] [2] [7] [1 1] [4]; summed [3 5 2] [7 1 1] [4] (v1 carries
// the short last batch into the next pass; here it is the epoch's last). Each epoch is cut anew
// and a restored state finds its batch.
TEST(BatchLoader, TokenBudgetCutsTheEpochAsV1sDynamicBatching) {
  TokenizedDataset d;
  for (int len : {3, 5, 2, 7, 1, 1, 4}) d.rows.push_back(std::vector<int32_t>(len, 10 + len));
  LoaderOptions o;
  o.shuffle = false;
  o.token_budget = 10;
  auto sizes = [&](const LoaderOptions& opts) {
    BatchLoader loader(d, opts);
    std::vector<int64_t> out;
    const int64_t n = loader.batches_per_epoch();
    for (int64_t i = 0; i < n; ++i) out.push_back(static_cast<int64_t>(loader.next().row_indices.size()));
    EXPECT_EQ(loader.state(), (LoaderState{1, 0}));
    return out;
  };
  EXPECT_EQ(sizes(o), (std::vector<int64_t>{2, 1, 1, 2, 1}));
  LoaderOptions packed = o;
  packed.budget_by_sum = true;
  EXPECT_EQ(sizes(packed), (std::vector<int64_t>{3, 3, 1}));

  // Shuffled: every epoch's batches cover its order once within the budget; a restored state
  // gives the batch the uninterrupted loader gave.
  o.shuffle = true;
  BatchLoader loader(d, o);
  std::vector<Batch> seen;
  for (int e = 0; e < 3; ++e) {
    std::vector<int64_t> rows;
    for (int64_t i = 0, n = loader.batches_per_epoch(); i < n; ++i) {
      Batch b = loader.next();
      EXPECT_TRUE(b.rows == 1 || b.rows * b.seq_len <= 10) << b.rows << " x " << b.seq_len;
      rows.insert(rows.end(), b.row_indices.begin(), b.row_indices.end());
      seen.push_back(b);
    }
    EXPECT_EQ(rows, loader.epoch_order(e));
  }
  BatchLoader resumed(d, o);
  const auto epoch0 = static_cast<size_t>(resumed.batches_per_epoch());
  resumed.restore({1, 1});
  EXPECT_EQ(resumed.next().input_ids, seen[epoch0 + 1].input_ids);
  EXPECT_THROW(resumed.restore({0, 99}), ConfigError);
  // group_by_length is not cut by a budget.
  LoaderOptions grouped = o;
  grouped.length_group = 4;
  EXPECT_THROW(BatchLoader(d, grouped), ConfigError);
}

// Pairs (v1's dpo under dynamic_batching): a pair's length is its chosen and rejected rows'
// together, v1's concatenated sample. Pairs of (2, 1), (3, 2), (1, 1), (4, 4), (2, 2) tokens are
// samples of 3, 5, 2, 8, 4; a padded budget of 10 cuts [3 5] [2] [8] [4] (2 × 5 fits, 3 × 5 and
// 2 × 8 do not), each batch its pairs' chosen rows, then their rejected rows, padded to the
// longest row. Packing pairs into one row is refused.
TEST(BatchLoader, TokenBudgetCutsPairsByTheirConcatenatedLength) {
  TokenizedDataset d;
  d.group = 2;
  int32_t tok = 1;
  for (auto [c, r] : std::vector<std::pair<int, int>>{{2, 1}, {3, 2}, {1, 1}, {4, 4}, {2, 2}}) {
    d.rows.push_back(std::vector<int32_t>(static_cast<size_t>(c), tok++));
    d.rows.push_back(std::vector<int32_t>(static_cast<size_t>(r), tok++));
  }
  LoaderOptions o;
  o.shuffle = false;
  o.token_budget = 10;
  BatchLoader loader(d, o);
  ASSERT_EQ(loader.batches_per_epoch(), 4);
  const Batch first = loader.next();
  EXPECT_EQ(first.rows, 4);
  EXPECT_EQ(first.seq_len, 3);
  EXPECT_EQ(first.row_indices, (std::vector<int64_t>{0, 2, 1, 3}));
  EXPECT_EQ(first.lengths, (std::vector<int32_t>{2, 3, 1, 2}));
  for (int64_t want : {2, 2, 2}) EXPECT_EQ(loader.next().rows, want);
  EXPECT_EQ(loader.state(), (LoaderState{1, 0}));
  o.budget_by_sum = true;
  EXPECT_THROW(BatchLoader(d, o), ConfigError);
}

// dynamic_padding_free's batch is one row: the rows end to end, each its own segment and
// positions, the first label of every row after the first ignored, padded to the multiple asked.
TEST(BatchLoader, PaddingFreeBudgetPacksTheBatchIntoOneRow) {
  TokenizedDataset d;
  d.rows = {{5, 6, 7}, {8, 9}, {4}};
  d.labels = {{-100, 6, 7}, {8, 9}, {4}};
  LoaderOptions o;
  o.shuffle = false;
  o.token_budget = 100;
  o.budget_by_sum = true;
  o.pad_to_multiple_of = 4;
  o.pad_id = 0;
  BatchLoader loader(d, o);
  ASSERT_EQ(loader.batches_per_epoch(), 1);
  const Batch b = loader.next();
  EXPECT_EQ(b.rows, 1);
  EXPECT_EQ(b.seq_len, 8);
  EXPECT_EQ(b.input_ids, (std::vector<int32_t>{5, 6, 7, 8, 9, 4, 0, 0}));
  EXPECT_EQ(b.labels, (std::vector<int32_t>{-100, 6, 7, -100, 9, -100, -100, -100}));
  EXPECT_EQ(b.position_ids, (std::vector<int32_t>{0, 1, 2, 0, 1, 0, 1, 2}));
  EXPECT_EQ(b.segment_ids, (std::vector<int32_t>{1, 1, 1, 2, 2, 3, 0, 0}));
  EXPECT_EQ(b.lengths, (std::vector<int32_t>{6}));
  EXPECT_EQ(b.row_indices, (std::vector<int64_t>{0, 1, 2}));
}

}  // namespace
}  // namespace unillm::data
