// SFT packing: LLaMA-Factory's greedy knapsack and PaddleNLP's in-order zero padding (see
// packing.h for the exact rules and where they come from).
#include "data/packing.h"

#include <algorithm>
#include <map>
#include <set>

#include "core/error.h"
#include "data/batch_loader.h"  // kIgnoreIndex
#include "data/error.h"

namespace unillm::data {

std::vector<std::vector<int64_t>> greedy_knapsack(std::vector<int64_t> lengths, int64_t capacity) {
  // A sorted multiset stands in for the sorted list: "largest value <= remaining" is
  // bisect_right(numbers, remaining) - 1; equal values are interchangeable.
  std::multiset<int64_t> numbers(lengths.begin(), lengths.end());
  std::vector<std::vector<int64_t>> knapsacks;
  while (!numbers.empty()) {
    std::vector<int64_t> current;
    int64_t remaining = capacity;
    for (;;) {
      auto it = numbers.upper_bound(remaining);
      if (it == numbers.begin()) break;  // nothing fits
      --it;
      remaining -= *it;
      current.push_back(*it);
      numbers.erase(it);
    }
    if (current.empty())  // a length above capacity: LLaMA-Factory would loop forever
      UNILLM_THROW(ConfigError, "[packing] length ", *numbers.begin(), " exceeds capacity ",
                   capacity);
    knapsacks.push_back(std::move(current));
  }
  return knapsacks;
}

std::vector<std::vector<int64_t>> knapsack_rows(const std::vector<int64_t>& lengths,
                                                int64_t capacity) {
  std::map<int64_t, std::vector<int64_t>> length2indexes;
  for (size_t i = 0; i < lengths.size(); ++i)
    length2indexes[lengths[i]].push_back(static_cast<int64_t>(i));
  std::vector<std::vector<int64_t>> rows;
  for (const auto& knapsack : greedy_knapsack(lengths, capacity)) {
    std::vector<int64_t> row;
    for (int64_t len : knapsack) {
      auto& idx = length2indexes[len];
      row.push_back(idx.back());
      idx.pop_back();
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

std::vector<std::vector<int64_t>> sequential_rows(const std::vector<int64_t>& lengths,
                                                  int64_t capacity) {
  std::vector<std::vector<int64_t>> rows;
  std::vector<int64_t> current;
  int64_t used = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] > capacity) continue;
    if (used + lengths[i] > capacity) {
      rows.push_back(std::move(current));
      current.clear();
      used = 0;
    }
    current.push_back(static_cast<int64_t>(i));
    used += lengths[i];
  }
  if (!current.empty()) rows.push_back(std::move(current));
  return rows;
}

namespace {

// Appends one row made of the given samples to out.
void emit_row(const TokenizedDataset& samples, const std::vector<int64_t>& members,
              const PackingOptions& o, TokenizedDataset& out) {
  std::vector<int32_t> ids, labels, pos, seg;
  for (size_t k = 0; k < members.size(); ++k) {
    const auto& s = samples.rows[members[k]];
    const auto& l = samples.labels.empty() ? s : samples.labels[members[k]];
    ids.insert(ids.end(), s.begin(), s.end());
    labels.insert(labels.end(), l.begin(), l.end());
    for (size_t t = 0; t < s.size(); ++t) pos.push_back(static_cast<int32_t>(t));
    seg.insert(seg.end(), s.size(), static_cast<int32_t>(k + 1));
  }
  if (o.pad_to_cutoff && static_cast<int64_t>(ids.size()) < o.cutoff_len + 1) {
    const size_t pad = static_cast<size_t>(o.cutoff_len + 1) - ids.size();
    ids.insert(ids.end(), pad, o.pad_id);
    labels.insert(labels.end(), pad, kIgnoreIndex);
    pos.insert(pos.end(), pad, 0);
    seg.insert(seg.end(), pad, 0);
  }
  out.rows.push_back(std::move(ids));
  out.labels.push_back(std::move(labels));
  if (!o.positions_continue) out.position_ids.push_back(std::move(pos));
  if (o.neat) out.segment_ids.push_back(std::move(seg));
  out.documents += static_cast<int64_t>(members.size());
}

void check_samples(const TokenizedDataset& samples, const PackingOptions& o) {
  if (o.cutoff_len < 1) UNILLM_THROW(ConfigError, "[packing] cutoff_len must be >= 1");
  if (o.group_size < 1) UNILLM_THROW(ConfigError, "[packing] group size must be >= 1");
  if (!samples.labels.empty() && samples.labels.size() != samples.rows.size())
    throw DataError(UNILLM_MSG("[packing] ", samples.labels.size(), " label rows for ",
                               samples.rows.size(), " samples"));
  for (size_t i = 0; i < samples.labels.size(); ++i)
    if (samples.labels[i].size() != samples.rows[i].size())
      throw DataError(UNILLM_MSG("[packing] sample ", i, " has ", samples.rows[i].size(),
                                 " ids but ", samples.labels[i].size(), " labels"));
}

}  // namespace

PackedRows pack_samples(const TokenizedDataset& samples, const PackingOptions& o) {
  check_samples(samples, o);
  PackedRows out;
  const int64_t n = static_cast<int64_t>(samples.rows.size());
  // PaddleNLP fills in order over the whole dataset; LLaMA-Factory packs each map batch.
  const int64_t group =
      o.grouping == PackGrouping::kSequential ? std::max<int64_t>(n, 1) : o.group_size;
  for (int64_t g = 0; g < n; g += group) {
    std::vector<int64_t> kept, lengths;  // samples of the group that fit, and their lengths
    for (int64_t i = g; i < std::min(n, g + group); ++i) {
      const int64_t len = static_cast<int64_t>(samples.rows[i].size());
      if (len > o.cutoff_len) {
        ++out.dropped_too_long;
        continue;
      }
      kept.push_back(i);
      lengths.push_back(len);
    }
    const auto rows = o.grouping == PackGrouping::kGreedyKnapsack
                          ? knapsack_rows(lengths, o.cutoff_len)
                          : sequential_rows(lengths, o.cutoff_len);
    for (const auto& row : rows) {
      std::vector<int64_t> members;
      for (int64_t local : row) members.push_back(kept[local]);
      emit_row(samples, members, o, out.data);
    }
  }
  return out;
}

TokenizedDataset select_rows(const TokenizedDataset& data, const std::vector<int64_t>& indices) {
  TokenizedDataset out;
  auto take = [&](const std::vector<std::vector<int32_t>>& from,
                  std::vector<std::vector<int32_t>>& to) {
    if (from.empty()) return;
    to.reserve(indices.size());
    for (int64_t i : indices) to.push_back(from.at(i));
  };
  take(data.rows, out.rows);
  take(data.labels, out.labels);
  take(data.position_ids, out.position_ids);
  take(data.segment_ids, out.segment_ids);
  return out;
}

}  // namespace unillm::data
