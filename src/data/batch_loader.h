// Training batches over a TokenizedDataset with an exact resume point.
//
// Order: epoch e visits the rows in permutation P(seed, e), or in dataset order when shuffle is
// false. P is a Fisher–Yates shuffle (i = n-1 .. 1, swap a[i] with a[j], j uniform in [0, i])
// driven by unillm::Rng seeded with seed + 0x9E3779B97F4A7C15 * (e + 1); j is drawn by rejection
// (r = next_u64() until r >= (2^64 - (i+1)) mod (i+1), then j = r mod (i+1)), so it is unbiased
// and fixed across platforms (unlike std::shuffle).
// Batches: consecutive runs of batch_size rows of that order; the last partial batch is kept (HF
// dataloader_drop_last=false). Rows are padded on the right to the longest row of the batch
// (rounded up to LoaderOptions::pad_to_multiple_of).
// Per-row labels / position ids / segment ids of the dataset (TokenizedDataset) are carried into
// the batch; padding gets label kIgnoreIndex, positions continuing after the row's last one and
// segment 0, so a pad is never scored and no real token attends to it.
// Rows are read through TokenizedDataset::row_length / read_row, so a dataset backed by a token
// corpus (input_dir; rows computed on demand) batches exactly like the same rows in memory.
// Grouped rows (TokenizedDataset::group == 2, pairwise data: rows 2e, 2e+1 are example e's chosen
// and rejected): everything above counts examples instead of rows — the permutation runs over the
// num_rows/2 examples, batch_size is examples per batch, the last partial batch is kept — and a
// batch of examples e_0 … e_{B−1} lays out member 0 of every example, then member 1 (rows 2e_0,
// …, 2e_{B−1}, 2e_0+1, …, 2e_{B−1}+1: LLaMA-Factory's PairwiseDataCollator, chosen rows 0..B−1
// and rejected rows B..2B−1; KTO's feedback data: target rows 0..B−1, then KL rows, as
// LLaMA-Factory's KTODataCollatorWithPadding batches input_ids and kl_input_ids), so a pair never
// spans two batches. group == 1 is the row loader.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "data/pretrain.h"

namespace unillm::data {

struct Batch {
  int64_t rows = 0;                // B (rows; group × examples)
  int64_t group = 1;               // the dataset's group: 2 = rows [0, B/2) chosen, then rejected
  int64_t seq_len = 0;             // T, the longest row of the batch
  std::vector<int32_t> input_ids;  // [B, T] row-major; pad_id after each row's end
  std::vector<int32_t> labels;     // [B, T] the dataset's labels (default: input_ids),
                                   // kIgnoreIndex on padding (unshifted: the loss shifts, as
                                   // HF's causal-LM loss does)
  std::vector<int32_t> position_ids;  // [B, T] or empty (= 0 … T−1 in every row) when the
                                      // dataset has none
  std::vector<int32_t> segment_ids;   // [B, T] or empty (attention within the whole row); a
                                      // token attends to earlier tokens of its segment; pad = 0
  std::vector<int32_t> lengths;       // [B] real tokens per row (the caller builds attention)
  std::vector<int64_t> row_indices;   // [B] which dataset rows
  // [B / group] the dataset's per-example tags (KTO: 1 = desirable) in the batch's example order
  // (example i owns rows i, B/group + i, …), or empty when the dataset has none.
  std::vector<uint8_t> tags;
  int64_t num_label_tokens() const;  // labels != kIgnoreIndex
};

struct LoaderOptions {
  int64_t batch_size = 8;  // per_device_train_batch_size (examples when the data is grouped)
  bool shuffle = true;     // false: dataset order (disable_shuffling)
  uint64_t seed = 42;
  // HF's group_by_length (its LengthGroupedSampler) when > 0 and shuffling: the epoch's
  // permutation is cut into megabatches of min(n / (4 · length_group), 50) (at least 1) ·
  // length_group examples, each sorted by length, longest first (a stable sort), and the longest
  // example of all is swapped to the front, so similar lengths share a batch and pad less.
  // length_group is the examples of one optimizer step (per-device batch × accumulation × data
  // parallel processes); an example's length is the sum of its rows'.
  int64_t length_group = 0;
  int32_t pad_id = 0;  // value of padded input_ids (labels there are always kIgnoreIndex)
  // The padded length T is rounded up to a multiple of this (HF collators' pad_to_multiple_of;
  // LLaMA-Factory's SFT collator pads training batches to 8 for shift_attn). 1 = the longest row.
  int64_t pad_to_multiple_of = 1;
  // LLaMA-Factory v1's dynamic batching when > 0 (not with length_group): instead of batch_size
  // examples, a batch takes the epoch's examples in order while its padded tokens (its examples ×
  // its longest example) stay within token_budget — with budget_by_sum (ungrouped rows only),
  // while the sum of its rows' lengths does, and the batch is then one packed row (v1's
  // dynamic_padding_free: the rows end to end, each its own segment with its own positions, the
  // first label of each row after the first ignored) — and at least one example. A pair's length
  // is its two rows' (v1's sample is the two concatenated); its batch stays two rows per pair,
  // padded to the longest row (v1's block-diagonal attention over the concatenation gives each
  // half the same states). The epoch's last batch may
  // fall short of the budget; each epoch's order is cut anew, so batches_per_epoch() is the
  // current epoch's count.
  int64_t token_budget = 0;
  bool budget_by_sum = false;
  // When set, labels equal to this id are also kIgnoreIndex (only for datasets without labels,
  // where labels are the ids). HF's
  // DataCollatorForLanguageModeling, which LLaMA-Factory's pt stage uses, masks every label equal
  // to pad_token_id; with pad = eos (LLaMA-Factory's default for Llama) that masks real EOS too.
  std::optional<int32_t> mask_label_id;
};

// The position of the next batch: batch_index within epoch. After an epoch's last batch the
// state is {epoch + 1, 0}.
struct LoaderState {
  int64_t epoch = 0;
  int64_t batch_index = 0;
  bool operator==(const LoaderState&) const = default;
};

class BatchLoader {
 public:
  // Keeps a reference to data, which must outlive the loader. Throws ConfigError when the data
  // is empty, batch_size < 1 or group is not 1 or 2, DataError when its labels / position_ids /
  // segment_ids are not empty or one per row of the row's length, its tags are not empty or one
  // per example, or the rows do not form whole groups.
  BatchLoader(const TokenizedDataset& data, const LoaderOptions& opts);

  int64_t batches_per_epoch() const;  // ceil(examples / batch_size), or the budget's cut of the epoch
  Batch next();                       // the batch at state(), then advances
  LoaderState state() const { return state_; }
  void restore(const LoaderState& s);  // throws ConfigError when batch_index is out of range
  // The order of an epoch (the permutation described above): row indices, or example indices
  // when the data is grouped.
  std::vector<int64_t> epoch_order(int64_t epoch) const;

 private:
  void group_by_length(std::vector<int64_t>& order) const;
  // order_ (and under a token budget bounds_, each batch's first place in it, then its size) for
  // epoch e, unless they already hold it.
  void load_epoch(int64_t e) const;
  const TokenizedDataset& data_;
  LoaderOptions opts_;
  LoaderState state_;
  mutable int64_t order_epoch_ = -1;
  mutable std::vector<int64_t> order_;
  mutable std::vector<int64_t> bounds_;
};

// Pads rows [B] into a Batch (used by the loader; also for evaluation batches in dataset order).
// Batch::group = data.group; for grouped data row_indices must be in group_rows' layout
// (ConfigError otherwise). Batch::tags = data.tags of the batch's examples when data has tags.
// Throws DataError when a selected row's labels/positions/segments do not match its length, or
// data.tags is neither empty nor one per example.
Batch make_batch(const TokenizedDataset& data, const std::vector<int64_t>& row_indices,
                 const LoaderOptions& opts);

// The rows of examples first_example … first_example + count − 1, in the loader's batch layout:
// member 0 of each example, then member 1, … (group 1: the rows themselves). For evaluation
// batches in dataset order: make_batch(data, group_rows(data, e, n), opts). Throws ConfigError
// when the range is outside [0, data.num_examples()].
std::vector<int64_t> group_rows(const TokenizedDataset& data, int64_t first_example, int64_t count);
// The same layout for any list of examples (the loader's batches).
std::vector<int64_t> group_rows(const TokenizedDataset& data, const std::vector<int64_t>& examples);

}  // namespace unillm::data
