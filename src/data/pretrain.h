// Pretraining data (stage pt), LLaMA-Factory's semantics: datasets by name from dataset_info.json,
// max_samples per dataset, documents concatenated across datasets in order, then tokenised by
// PretrainDatasetProcessor's rule, then val_size split (on the processed rows, as LLaMA-Factory
// splits after preprocessing).
//
// Packing (rows are blocks): within each group of `preprocessing_batch_size` documents (the
// batch of LLaMA-Factory's `dataset.map(batched=True)`), each document's tokens + EOS are
// concatenated in order and cut into blocks of `cutoff_len`; the group's remainder is dropped;
// when the tokenizer adds BOS, each block's first token is *replaced* by BOS.
// No packing (rows are documents): [BOS if the tokenizer adds it] + tokens + [EOS], truncated on
// the right to cutoff_len (so a long document loses its EOS).
// EOS: `eos_token` when given, else "<|end_of_text|>" for template llama3, else the tokenizer's.
// Text is tokenised without special tokens added but with special-token strings in the text
// recognised (HF's default, split_special_tokens=False).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "io/tokenizer.h"

namespace unillm::data {

struct DataOptions {
  std::vector<std::string> dataset;       // names in dataset_dir/dataset_info.json
  std::vector<std::string> eval_dataset;  // optional; excludes val_size
  std::string dataset_dir = "data";
  int64_t cutoff_len = 2048;  // block/row length; see train::TrainArgs::data_cutoff_len()
  bool packing = true;
  std::optional<int64_t> max_samples;  // first N rows of each dataset
  double val_size = 0.0;               // 0: none; < 1 fraction; > 1 count (see split.h)
  uint64_t seed = 42;                  // for the val_size split
  std::string template_name;           // only "llama3" changes pretraining (its EOS)
  std::string eos_token;               // overrides the EOS text when non-empty
  int64_t preprocessing_batch_size = 1000;
  bool skip_bad_records = false;
};

constexpr int32_t kIgnoreIndex = -100;  // label of an unscored position (HF's IGNORE_INDEX)

struct TokenizedDataset {
  std::vector<std::vector<int32_t>> rows;  // token ids; blocks (packing) or documents
  // Optional, per row and of the row's length; an empty outer vector means the default for every
  // row: labels = the ids (pretraining), positions 0, 1, … over the row, no segments (attention
  // crosses the whole row). SFT rows carry labels (kIgnoreIndex on prompt tokens); packed SFT
  // rows (data/packing.h) carry positions and, for neat packing, segment ids 1, 2, … per sample
  // (0 = padding).
  std::vector<std::vector<int32_t>> labels;
  std::vector<std::vector<int32_t>> position_ids;
  std::vector<std::vector<int32_t>> segment_ids;
  int64_t documents = 0;                   // documents that went in (after max_samples)
  int64_t skipped_records = 0;             // bad records skipped (skip_bad_records only)
  std::vector<std::string> skip_messages;  // the first few reasons, for the log
  int64_t num_tokens() const;
};

// Returns (train, eval); eval is empty without eval_dataset or val_size. Throws ConfigError for
// dataset_info problems, DataError for bad records (unless skip_bad_records) and when no training
// row results (e.g. fewer tokens than one block).
std::pair<TokenizedDataset, TokenizedDataset> load_pretrain_data(const DataOptions& opts,
                                                                 const io::Tokenizer& tokenizer);

// The EOS id pretraining appends (see above). Throws ConfigError when there is none.
int32_t pretrain_eos_id(const DataOptions& opts, const io::Tokenizer& tokenizer);

// The packing rule on already tokenised documents (EOS not yet appended). bos < 0: no BOS
// replacement. group: documents per packing group (preprocessing_batch_size).
std::vector<std::vector<int32_t>> pack_documents(const std::vector<std::vector<int32_t>>& docs,
                                                 int64_t block, int32_t eos, int32_t bos,
                                                 int64_t group);

}  // namespace unillm::data
