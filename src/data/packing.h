// Packing of encoded SFT samples into rows: LLaMA-Factory's PackedSupervisedDatasetProcessor
// (`packing`, `neat_packing`; greedy_knapsack in processor_utils.py) and PaddleNLP's
// `zero_padding` (ZeroPaddingMapDataset), on samples already rendered to (input_ids, labels).
//
// LLaMA-Factory (grouping kGreedyKnapsack, pad_to_cutoff):
//   - Samples are processed in groups of `group_size` (preprocessing_batch_size: the batch of its
//     dataset.map(batched=True)); a sample longer than cutoff_len is dropped.
//   - greedy_knapsack(lengths, cutoff_len): lengths sorted ascending; each new row repeatedly
//     takes the largest remaining length that still fits (bisect_right − 1) until none fits.
//     Samples of equal length are taken last-first (length2indexes[length].pop()).
//   - A row is its samples' input_ids (and labels) concatenated in knapsack order, then padded
//     with pad_id (label kIgnoreIndex, position 0, segment 0) to cutoff_len + 1 tokens: every row
//     has exactly cutoff_len + 1 tokens. cutoff_len here is LLaMA-Factory's data_args.cutoff_len
//     after its `cutoff_len -= 1` for packing (train::TrainArgs::data_cutoff_len()), so rows have
//     the user's cutoff_len tokens.
//   - Positions restart at 0 for every sample in both modes (LLaMA-Factory ≥ 0.9.3 passes
//     position_ids = range(len(sample)) per sample); `positions_continue` gives the older
//     behaviour (no position_ids: 0 … T−1 over the row; position_ids left empty).
//   - packing (neat = false): attention crosses samples (attention_mask all 1): no segment ids.
//     neat_packing (neat = true): segment ids 1, 2, … per sample within the row, 0 on padding:
//     block-diagonal causal attention.
// PaddleNLP zero_padding (grouping kSequential, neat, no pad_to_cutoff): samples in order; a
// sample longer than cutoff_len (max_length) is skipped; the next sample joins the current row
// when the row still has room, else it starts a new row; positions restart per sample; segment
// ids as neat packing; rows are not padded (the batch pads them). PaddleNLP measures a sample
// after its own label shift (tokens − 1); here lengths are unshifted token counts.
// Labels are concatenated as they are: as in LLaMA-Factory, the shifted loss scores a sample's
// last token against the next sample's first label (kIgnoreIndex unless train_on_prompt).
#pragma once

#include <cstdint>
#include <vector>

#include "data/pretrain.h"

namespace unillm::data {

enum class PackGrouping {
  kGreedyKnapsack,  // LLaMA-Factory packing / neat_packing
  kSequential,      // PaddleNLP zero_padding (greedy_zero_padding = false)
};

struct PackingOptions {
  int64_t cutoff_len = 2048;  // most sample tokens per row (see above)
  bool neat = false;          // segment ids per sample (block-diagonal attention)
  PackGrouping grouping = PackGrouping::kGreedyKnapsack;
  bool pad_to_cutoff = true;        // pad each row to cutoff_len + 1 tokens (LLaMA-Factory)
  bool positions_continue = false;  // positions 0 … T−1 over the row (LLaMA-Factory ≤ 0.9.2)
  int64_t group_size = 1000;        // samples per packing group (preprocessing_batch_size)
  int32_t pad_id = 0;               // the tokenizer's pad id (LLaMA-Factory: pad = eos if unset)
};

struct PackedRows {
  TokenizedDataset data;         // rows with labels, position_ids (unless positions_continue) and
                                 // segment_ids (neat only); data.documents = samples packed
  int64_t dropped_too_long = 0;  // samples longer than cutoff_len
};

// samples: one row per encoded sample with its labels (samples.labels empty: labels = ids).
// Throws ConfigError when cutoff_len < 1 or group_size < 1, DataError when a sample's labels do
// not match its ids in length.
PackedRows pack_samples(const TokenizedDataset& samples, const PackingOptions& opts);

// LLaMA-Factory's greedy_knapsack on lengths: the lengths of each knapsack in the order taken.
std::vector<std::vector<int64_t>> greedy_knapsack(std::vector<int64_t> lengths, int64_t capacity);

// The knapsack rows as sample indices (into lengths), equal lengths assigned last-first as
// LLaMA-Factory's length2indexes[length].pop(). Every length must be <= capacity.
std::vector<std::vector<int64_t>> knapsack_rows(const std::vector<int64_t>& lengths,
                                                int64_t capacity);

// PaddleNLP's in-order filling: sample indices per row; lengths > capacity are skipped.
std::vector<std::vector<int64_t>> sequential_rows(const std::vector<int64_t>& lengths,
                                                  int64_t capacity);

// The rows at indices, in that order, with their labels/positions/segments (for val_size splits
// of SFT data). Counters (documents, skipped_records, skip_messages) are not carried over.
TokenizedDataset select_rows(const TokenizedDataset& data, const std::vector<int64_t>& indices);

}  // namespace unillm::data
