// SFT packing: LLaMA-Factory's greedy knapsack against a naive re-statement of its description,
// row layout per mode (packing, neat_packing, PaddleNLP zero_padding), padding, dropping, groups.
#include "data/packing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "core/error.h"
#include "data/batch_loader.h"
#include "data/error.h"

namespace unillm::data {
namespace {

using Rows = std::vector<std::vector<int32_t>>;
using Groups = std::vector<std::vector<int64_t>>;

// Written from LLaMA-Factory's description: sort ascending; for each new knapsack, repeatedly
// find the largest number that fits (bisect_right(numbers, remaining) - 1) in the sorted list,
// subtract it, pop it from the list; stop when nothing fits.
Groups naive_knapsack(std::vector<int64_t> numbers, int64_t capacity) {
  std::sort(numbers.begin(), numbers.end());
  Groups out;
  while (!numbers.empty()) {
    std::vector<int64_t> cur;
    int64_t remaining = capacity;
    for (;;) {
      size_t hi = 0;  // bisect_right: first index with numbers[i] > remaining
      while (hi < numbers.size() && numbers[hi] <= remaining) ++hi;
      if (hi == 0) break;
      remaining -= numbers[hi - 1];
      cur.push_back(numbers[hi - 1]);
      numbers.erase(numbers.begin() + static_cast<int64_t>(hi) - 1);
    }
    out.push_back(cur);
  }
  return out;
}

// length2indexes[length].pop(): the last unused sample of that length.
Groups naive_rows(const std::vector<int64_t>& lengths, int64_t capacity) {
  Groups rows;
  std::vector<bool> used(lengths.size(), false);
  for (const auto& k : naive_knapsack(lengths, capacity)) {
    std::vector<int64_t> row;
    for (int64_t len : k) {
      for (int64_t i = static_cast<int64_t>(lengths.size()) - 1; i >= 0; --i) {
        if (!used[i] && lengths[i] == len) {
          used[i] = true;
          row.push_back(i);
          break;
        }
      }
    }
    rows.push_back(row);
  }
  return rows;
}

TEST(Packing, GreedyKnapsackByHand) {
  // Sorted [2 2 3 4 5 7], capacity 10: [7 3] (1 left, nothing fits), [5 4], [2 2].
  std::vector<int64_t> lengths = {3, 5, 2, 7, 4, 2};
  EXPECT_EQ(greedy_knapsack(lengths, 10), (Groups{{7, 3}, {5, 4}, {2, 2}}));
  // Samples: 7 → #3, 3 → #0; 5 → #1, 4 → #4; the two 2s last-first: #5 then #2.
  EXPECT_EQ(knapsack_rows(lengths, 10), (Groups{{3, 0}, {1, 4}, {5, 2}}));
}

TEST(Packing, GreedyKnapsackMatchesTheNaiveStatement) {
  std::mt19937_64 gen(1234);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t capacity = 4 + static_cast<int64_t>(gen() % 60);
    const size_t n = gen() % 40;
    std::vector<int64_t> lengths(n);
    for (auto& l : lengths) l = 1 + static_cast<int64_t>(gen() % capacity);  // 1..capacity
    ASSERT_EQ(greedy_knapsack(lengths, capacity), naive_knapsack(lengths, capacity)) << trial;
    const Groups rows = knapsack_rows(lengths, capacity);
    ASSERT_EQ(rows, naive_rows(lengths, capacity)) << trial;
    std::vector<int64_t> seen;
    for (const auto& r : rows) {
      int64_t sum = 0;
      for (int64_t i : r) sum += lengths[i], seen.push_back(i);
      EXPECT_LE(sum, capacity);
    }
    std::sort(seen.begin(), seen.end());
    for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], static_cast<int64_t>(i));
    ASSERT_EQ(seen.size(), n);
  }
}

// Sample i: ids 10i+1 … 10i+len; labels kIgnoreIndex on the first `prompt` tokens, else the id.
TokenizedDataset samples_of(const std::vector<int>& lens, int prompt = 1) {
  TokenizedDataset d;
  for (size_t i = 0; i < lens.size(); ++i) {
    std::vector<int32_t> ids, labels;
    for (int t = 0; t < lens[i]; ++t) {
      ids.push_back(static_cast<int32_t>(10 * i + t + 1));
      labels.push_back(t < prompt ? kIgnoreIndex : ids.back());
    }
    d.rows.push_back(ids);
    d.labels.push_back(labels);
  }
  return d;
}

constexpr int32_t X = kIgnoreIndex;

TEST(Packing, LlamaFactoryPackingRowLayout) {
  // Lengths 3, 4, 2 with cutoff 6: sorted [2 3 4] → [4 2] = samples #1, #2; then [3] = #0.
  PackingOptions o;
  o.cutoff_len = 6;
  o.pad_id = 0;
  PackedRows p = pack_samples(samples_of({3, 4, 2}), o);
  EXPECT_EQ(p.dropped_too_long, 0);
  EXPECT_EQ(p.data.documents, 3);
  // Rows are cutoff_len + 1 = 7 tokens; pads: id 0, label -100, position 0.
  EXPECT_EQ(p.data.rows, (Rows{{11, 12, 13, 14, 21, 22, 0}, {1, 2, 3, 0, 0, 0, 0}}));
  EXPECT_EQ(p.data.labels, (Rows{{X, 12, 13, 14, X, 22, X}, {X, 2, 3, X, X, X, X}}));
  // Positions restart per sample (LLaMA-Factory >= 0.9.3), attention crosses: no segments.
  EXPECT_EQ(p.data.position_ids, (Rows{{0, 1, 2, 3, 0, 1, 0}, {0, 1, 2, 0, 0, 0, 0}}));
  EXPECT_TRUE(p.data.segment_ids.empty());

  o.positions_continue = true;  // LLaMA-Factory <= 0.9.2: no position_ids (0 … T-1)
  EXPECT_TRUE(pack_samples(samples_of({3, 4, 2}), o).data.position_ids.empty());
}

TEST(Packing, NeatPackingSegmentsAndPadding) {
  PackingOptions o;
  o.cutoff_len = 6;
  o.neat = true;
  o.pad_id = 9;
  PackedRows p = pack_samples(samples_of({3, 4, 2}), o);
  EXPECT_EQ(p.data.rows, (Rows{{11, 12, 13, 14, 21, 22, 9}, {1, 2, 3, 9, 9, 9, 9}}));
  EXPECT_EQ(p.data.segment_ids, (Rows{{1, 1, 1, 1, 2, 2, 0}, {1, 1, 1, 0, 0, 0, 0}}));
  EXPECT_EQ(p.data.position_ids, (Rows{{0, 1, 2, 3, 0, 1, 0}, {0, 1, 2, 0, 0, 0, 0}}));
}

TEST(Packing, LongSamplesAreDroppedAndAFullRowStillGetsOnePad) {
  PackingOptions o;
  o.cutoff_len = 4;
  PackedRows p = pack_samples(samples_of({5, 4, 1}), o);
  EXPECT_EQ(p.dropped_too_long, 1);  // length 5 > 4; length 4 == cutoff is kept
  EXPECT_EQ(p.data.documents, 2);
  EXPECT_EQ(p.data.rows, (Rows{{11, 12, 13, 14, 0}, {21, 0, 0, 0, 0}}));
  o.pad_to_cutoff = false;
  EXPECT_EQ(pack_samples(samples_of({5, 4, 1}), o).data.rows, (Rows{{11, 12, 13, 14}, {21}}));
}

TEST(Packing, KnapsacksStayWithinPreprocessingBatches) {
  PackingOptions o;
  o.cutoff_len = 6;
  o.pad_to_cutoff = false;
  o.group_size = 2;  // groups {#0 #1} and {#2 #3}
  PackedRows p = pack_samples(samples_of({3, 2, 3, 1}), o);
  // Group 1: [3 2] = #0 #1 together. Group 2: [3 1] = #2 #3 together.
  EXPECT_EQ(p.data.rows, (Rows{{1, 2, 3, 11, 12}, {21, 22, 23, 31}}));
  o.group_size = 1000;  // one group: sorted [1 2 3 3] → [3 3] (#2 #0), [2 1] (#1 #3)
  EXPECT_EQ(pack_samples(samples_of({3, 2, 3, 1}), o).data.rows,
            (Rows{{21, 22, 23, 1, 2, 3}, {11, 12, 31}}));
}

TEST(Packing, PaddleZeroPaddingFillsInOrder) {
  EXPECT_EQ(sequential_rows({4, 3, 5, 2, 12, 6}, 10), (Groups{{0, 1}, {2, 3}, {5}}));
  PackingOptions o;
  o.cutoff_len = 6;
  o.grouping = PackGrouping::kSequential;
  o.neat = true;
  o.pad_to_cutoff = false;
  o.group_size = 1;  // ignored: PaddleNLP fills over the whole dataset
  PackedRows p = pack_samples(samples_of({3, 2, 7, 2, 4}), o);
  EXPECT_EQ(p.dropped_too_long, 1);
  EXPECT_EQ(p.data.rows, (Rows{{1, 2, 3, 11, 12}, {31, 32, 41, 42, 43, 44}}));
  EXPECT_EQ(p.data.segment_ids, (Rows{{1, 1, 1, 2, 2}, {1, 1, 2, 2, 2, 2}}));
  EXPECT_EQ(p.data.position_ids, (Rows{{0, 1, 2, 0, 1}, {0, 1, 0, 1, 2, 3}}));
}

TEST(Packing, SamplesWithoutLabelsAndBadInput) {
  TokenizedDataset d;
  d.rows = {{5, 6}, {7}};
  PackingOptions o;
  o.cutoff_len = 3;
  PackedRows p = pack_samples(d, o);
  EXPECT_EQ(p.data.labels, (Rows{{5, 6, 7, X}}));  // labels = ids when the samples have none
  d.labels = {{5, 6}, {}};
  EXPECT_THROW(pack_samples(d, o), DataError);
  o.cutoff_len = 0;
  EXPECT_THROW(pack_samples(TokenizedDataset{}, o), ConfigError);
  EXPECT_THROW(greedy_knapsack({5}, 4), ConfigError);
}

TEST(Packing, SelectRowsCarriesEveryField) {
  PackingOptions o;
  o.cutoff_len = 6;
  o.neat = true;
  PackedRows p = pack_samples(samples_of({3, 4, 2}), o);
  TokenizedDataset s = select_rows(p.data, {1, 0});
  EXPECT_EQ(s.rows[0], p.data.rows[1]);
  EXPECT_EQ(s.labels[1], p.data.labels[0]);
  EXPECT_EQ(s.position_ids[0], p.data.position_ids[1]);
  EXPECT_EQ(s.segment_ids[1], p.data.segment_ids[0]);
  TokenizedDataset plain;
  plain.rows = {{1}, {2}};
  EXPECT_TRUE(select_rows(plain, {1}).labels.empty());
}

TEST(Packing, PackedRowsMakeUnpaddedBatches) {
  PackingOptions o;
  o.cutoff_len = 6;
  o.neat = true;
  PackedRows p = pack_samples(samples_of({3, 4, 2}), o);
  LoaderOptions lo;
  lo.batch_size = 2;
  lo.shuffle = false;
  Batch b = make_batch(p.data, {0, 1}, lo);
  EXPECT_EQ(b.seq_len, 7);
  EXPECT_EQ(b.labels, (std::vector<int32_t>{X, 12, 13, 14, X, 22, X, X, 2, 3, X, X, X, X}));
  EXPECT_EQ(b.segment_ids, (std::vector<int32_t>{1, 1, 1, 1, 2, 2, 0, 1, 1, 1, 0, 0, 0, 0}));
  EXPECT_EQ(b.position_ids, (std::vector<int32_t>{0, 1, 2, 3, 0, 1, 0, 0, 1, 2, 0, 0, 0, 0}));
}

}  // namespace
}  // namespace unillm::data
