// Training batches over a TokenizedDataset with an exact resume point.
//
// Order: epoch e visits the rows in permutation P(seed, e), or in dataset order when shuffle is
// false. P is a Fisher–Yates shuffle (i = n-1 .. 1, swap a[i] with a[j], j uniform in [0, i])
// driven by unillm::Rng seeded with seed + 0x9E3779B97F4A7C15 * (e + 1); j is drawn by rejection
// (r = next_u64() until r >= (2^64 - (i+1)) mod (i+1), then j = r mod (i+1)), so it is unbiased
// and fixed across platforms (unlike std::shuffle).
// Batches: consecutive runs of batch_size rows of that order; the last partial batch is kept (HF
// dataloader_drop_last=false). Rows are padded on the right to the longest row of the batch.
// Per-row labels / position ids / segment ids of the dataset (TokenizedDataset) are carried into
// the batch; padding gets label kIgnoreIndex, positions continuing after the row's last one and
// segment 0, so a pad is never scored and no real token attends to it.
// Rows are read through TokenizedDataset::row_length / read_row, so a dataset backed by a token
// corpus (input_dir; rows computed on demand) batches exactly like the same rows in memory.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "data/pretrain.h"

namespace unillm::data {


struct Batch {
  int64_t rows = 0;                   // B
  int64_t seq_len = 0;                // T, the longest row of the batch
  std::vector<int32_t> input_ids;     // [B, T] row-major; pad_id after each row's end
  std::vector<int32_t> labels;        // [B, T] the dataset's labels (default: input_ids),
                                      // kIgnoreIndex on padding (unshifted: the loss shifts, as
                                      // HF's causal-LM loss does)
  std::vector<int32_t> position_ids;  // [B, T] or empty (= 0 … T−1 in every row) when the
                                      // dataset has none
  std::vector<int32_t> segment_ids;   // [B, T] or empty (attention within the whole row); a
                                      // token attends to earlier tokens of its segment; pad = 0
  std::vector<int32_t> lengths;       // [B] real tokens per row (the caller builds attention)
  std::vector<int64_t> row_indices;   // [B] which dataset rows
  int64_t num_label_tokens() const;   // labels != kIgnoreIndex
};

struct LoaderOptions {
  int64_t batch_size = 8;  // per_device_train_batch_size
  bool shuffle = true;     // false: dataset order (disable_shuffling)
  uint64_t seed = 42;
  int32_t pad_id = 0;  // value of padded input_ids (labels there are always kIgnoreIndex)
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
  // is empty or batch_size < 1, DataError when its labels / position_ids / segment_ids are not
  // empty or one per row of the row's length.
  BatchLoader(const TokenizedDataset& data, const LoaderOptions& opts);

  int64_t batches_per_epoch() const;
  Batch next();  // the batch at state(), then advances
  LoaderState state() const { return state_; }
  void restore(const LoaderState& s);  // throws ConfigError when batch_index is out of range
  // The row order of an epoch (the permutation described above).
  std::vector<int64_t> epoch_order(int64_t epoch) const;

 private:
  const TokenizedDataset& data_;
  LoaderOptions opts_;
  LoaderState state_;
  int64_t order_epoch_ = -1;
  std::vector<int64_t> order_;
};

// Pads rows [B] into a Batch (used by the loader; also for evaluation batches in dataset order).
// Throws DataError when a selected row's labels/positions/segments do not match its length.
Batch make_batch(const TokenizedDataset& data, const std::vector<int64_t>& row_indices,
                 const LoaderOptions& opts);

}  // namespace unillm::data
