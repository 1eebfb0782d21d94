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
// input_dir (a token corpus written by `unillm preprocess`, data/corpus_data.h) replaces dataset:
// documents are split by `split` weights in order, then the same rules apply within each split,
// with rows computed on demand from the memory-mapped corpus (TokenizedDataset::source).
#pragma once

#include <cstdint>
#include <memory>
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
  std::string mix_strategy = "concat";  // how the datasets merge (data/mix.h)
  std::vector<double> interleave_probs;  // the interleave strategies' random mix (with seed)
  double val_size = 0.0;               // 0: none; < 1 fraction; > 1 count (see split.h)
  uint64_t seed = 42;                  // for the val_size split and interleave_probs
  std::string template_name;           // only "llama3" changes pretraining (its EOS)
  std::string eos_token;               // overrides the EOS text when non-empty
  int64_t preprocessing_batch_size = 1000;
  bool skip_bad_records = false;
  // A pre-tokenised corpus (PREFIX of PREFIX.idx/.bin, or a dir holding one) instead of dataset,
  // and PaddleNLP's train/valid/test weights over its documents ("949,50,1"; see corpus_data.h).
  std::string input_dir;
  std::string split = "949,50,1";
};

constexpr int32_t kIgnoreIndex = -100;  // label of an unscored position (HF's IGNORE_INDEX)

// Rows computed on demand from a backing store (a memory-mapped token corpus), so a corpus larger
// than memory can be trained from. Immutable; read_row may be called from several threads.
class RowSource {
 public:
  virtual ~RowSource() = default;
  virtual int64_t size() const = 0;                         // rows
  virtual int64_t row_length(int64_t r) const = 0;          // ids in row r
  virtual void read_row(int64_t r, int32_t* out) const = 0;  // writes row_length(r) ids
  virtual int64_t num_tokens() const = 0;                   // sum of the row lengths
};

struct TokenizedDataset {
  std::vector<std::vector<int32_t>> rows;  // token ids; blocks (packing) or documents
  // When set, the rows come from here and `rows` (and labels, positions, segments) stay empty.
  // Read rows through num_rows / row_length / read_row, which serve both cases.
  std::shared_ptr<const RowSource> source;
  // Optional, per row and of the row's length; an empty outer vector means the default for every
  // row: labels = the ids (pretraining), positions 0, 1, … over the row, no segments (attention
  // crosses the whole row). SFT rows carry labels (kIgnoreIndex on prompt tokens); packed SFT
  // rows (data/packing.h) carry positions and, for neat packing, segment ids 1, 2, … per sample
  // (0 = padding).
  std::vector<std::vector<int32_t>> labels;
  std::vector<std::vector<int32_t>> position_ids;
  std::vector<std::vector<int32_t>> segment_ids;
  // Rows per example: 1, or 2 for pairwise data (stages rm, dpo; data/pairwise.h), where rows 2e
  // and 2e+1 are example e's chosen and rejected rows, and for feedback data (stage kto;
  // data/feedback.h), example e's target and KL rows. The loader (data/batch_loader.h) and the
  // val_size split keep an example's rows together and count examples, not rows.
  int64_t group = 1;
  // One flag per example (num_examples()), or empty: KTO's kto_tag (1 = desirable). Carried by
  // the val_size split (split_val_examples) and into Batch::tags.
  std::vector<uint8_t> tags;
  int64_t documents = 0;                   // documents that went in (after max_samples)
  int64_t skipped_records = 0;             // bad records skipped (skip_bad_records only)
  std::vector<std::string> skip_messages;  // the first few reasons, for the log
  int64_t num_tokens() const;
  int64_t num_rows() const;
  int64_t num_examples() const { return num_rows() / group; }  // groups of `group` rows
  int64_t row_length(int64_t r) const;
  void read_row(int64_t r, int32_t* out) const;  // row_length(r) ids
};

// Appends from's examples after to's (eval_on_each_dataset's per-dataset sets made one): rows,
// and labels, positions, segments and tags, each materialised with its default where only one
// side has it. Both must be in memory (no source) with the same group.
void append_examples(TokenizedDataset& to, const TokenizedDataset& from);

// Returns (train, eval); eval is empty without eval_dataset or val_size. Throws ConfigError for
// dataset_info problems, DataError for bad records (unless skip_bad_records) and when no training
// row results (e.g. fewer tokens than one block).
std::pair<TokenizedDataset, TokenizedDataset> load_pretrain_data(const DataOptions& opts,
                                                                 const io::Tokenizer& tokenizer);

// How pretraining tokenises a document (no BOS/EOS added, special-token strings recognised);
// `unillm preprocess` uses the same, so a corpus holds exactly the ids raw text would give.
io::EncodeOptions pretrain_encode_options();

// The EOS id pretraining appends (see above). Throws ConfigError when there is none.
int32_t pretrain_eos_id(const DataOptions& opts, const io::Tokenizer& tokenizer);

// The packing rule on already tokenised documents (EOS not yet appended). bos < 0: no BOS
// replacement. group: documents per packing group (preprocessing_batch_size).
std::vector<std::vector<int32_t>> pack_documents(const std::vector<std::vector<int32_t>>& docs,
                                                 int64_t block, int32_t eos, int32_t bos,
                                                 int64_t group);

}  // namespace unillm::data
