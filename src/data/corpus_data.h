// Pretraining from a token corpus (`input_dir`, PaddleNLP run_pretrain.py's key) without
// re-tokenising and without holding the corpus in memory.
//
// Semantics (docs/corpora.md):
// 1. `split` ("949,50,1", PaddleNLP's train/valid/test weights; ',' or '/' separated, missing
//    weights are 0) cuts the documents *in file order* into three contiguous ranges by
//    Megatron/PaddleNLP's rule: weights normalised, end_i = end_{i-1} + round(w_i * n) with
//    Python's round (half to even), then every end shifted by (end_3 - n) so the last is n.
// 2. Within the train and the valid range, pretrain.h's raw-text rule applies as if that range
//    were one dataset: packing groups of preprocessing_batch_size documents, tokens + EOS per
//    document, blocks of cutoff_len, remainders dropped, BOS replacing each block's first token;
//    or, without packing, one row per document. So the train rows of `split: 1,0,0` are exactly
//    the rows of `dataset:` naming the same documents as raw text.
// 3. The valid range is the evaluation set (like val_size); the test range is not used.
// Rows are computed on demand from the corpus files; memory holds one offset per packing group.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <utility>

#include "data/pretrain.h"
#include "data/token_corpus.h"

namespace unillm::data {

// Parses a split string into three non-negative weights with a positive sum. Throws ConfigError
// "[data] split 'x': ..." when malformed.
std::array<double, 3> parse_split(const std::string& split);

// Document ranges [begin, end) of train, valid and test for n documents (rule 1 above).
std::array<std::pair<int64_t, int64_t>, 3> split_ranges(const std::array<double, 3>& w, int64_t n);

// input_dir → the corpus prefix: PREFIX when PREFIX.idx exists, else a directory holding exactly
// one *.idx (PaddleNLP's input_dir is a directory). Throws ConfigError naming input_dir.
std::string resolve_corpus_prefix(const std::string& input_dir);

struct CorpusRowOptions {
  int64_t block = 2048;  // cutoff_len
  bool packing = true;
  int64_t group = 1000;  // preprocessing_batch_size
  int32_t eos = -1;
  int32_t bos = -1;  // < 0: no BOS
};

// The rows of documents [begin, end) of a corpus (rule 2 above).
class CorpusRows : public RowSource {
 public:
  CorpusRows(std::shared_ptr<const TokenCorpus> corpus, int64_t begin, int64_t end,
             const CorpusRowOptions& opts);
  int64_t size() const override { return rows_; }
  int64_t row_length(int64_t r) const override;
  void read_row(int64_t r, int32_t* out) const override;
  int64_t num_tokens() const override { return tokens_; }

 private:
  void read_block(int64_t r, int32_t* out) const;
  std::shared_ptr<const TokenCorpus> c_;
  int64_t begin_, end_;
  CorpusRowOptions o_;
  std::vector<int64_t> group_first_row_;  // packing: first block of each group, then the total
  int64_t rows_ = 0, tokens_ = 0;
};

// load_pretrain_data for opts.input_dir: (train, eval) from the train and valid ranges. Throws
// ConfigError (input_dir / split problems, a corpus made with another tokenizer, keys that do not
// apply), DataError (a damaged corpus; no training row).
std::pair<TokenizedDataset, TokenizedDataset> load_corpus_data(const DataOptions& opts,
                                                               const io::Tokenizer& tok);
// The test range of opts.split (do_predict), with the same rows as load_corpus_data's.
TokenizedDataset load_corpus_test_rows(const DataOptions& opts, const io::Tokenizer& tok);

}  // namespace unillm::data
