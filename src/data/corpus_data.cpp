// Train/valid rows from a token corpus, computed on demand (see corpus_data.h).
#include "data/corpus_data.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "data/error.h"

namespace unillm::data {

namespace fs = std::filesystem;

std::array<double, 3> parse_split(const std::string& split) {
  auto bad = [&](const std::string& why) -> std::array<double, 3> {
    UNILLM_THROW(ConfigError, "[data] split '", split, "': ", why,
                 " (expected up to three weights such as 949,50,1)");
  };
  const char sep = split.find(',') != std::string::npos ? ',' : '/';
  std::array<double, 3> w = {0, 0, 0};
  size_t pos = 0, k = 0;
  for (; pos <= split.size(); ++k) {
    size_t end = split.find(sep, pos);
    if (end == std::string::npos) end = split.size();
    std::string item = split.substr(pos, end - pos);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (k >= 3) return bad("more than three weights");
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size() || !std::isfinite(v) || v < 0)
      return bad("'" + item + "' is not a non-negative number");
    w[k] = v;
    pos = end + 1;
  }
  if (w[0] + w[1] + w[2] <= 0) return bad("the weights sum to 0");
  return w;
}

std::array<std::pair<int64_t, int64_t>, 3> split_ranges(const std::array<double, 3>& w, int64_t n) {
  const double sum = w[0] + w[1] + w[2];
  int64_t idx[4] = {0, 0, 0, 0};
  for (int i = 0; i < 3; ++i)  // nearbyint in the default mode rounds half to even, as Python
    idx[i + 1] = idx[i] + static_cast<int64_t>(std::nearbyint(w[i] / sum * static_cast<double>(n)));
  const int64_t diff = idx[3] - n;
  for (int i = 1; i < 4; ++i) idx[i] -= diff;
  std::array<std::pair<int64_t, int64_t>, 3> r;
  for (int i = 0; i < 3; ++i)  // a rounding that pushes an end below 0 leaves that range empty
    r[i] = {std::clamp<int64_t>(idx[i], 0, n), std::clamp<int64_t>(idx[i + 1], 0, n)};
  return r;
}

std::string resolve_corpus_prefix(const std::string& input_dir) {
  if (fs::exists(input_dir + ".idx")) return input_dir;
  if (fs::is_directory(input_dir)) {
    std::vector<std::string> found;
    for (const auto& e : fs::directory_iterator(input_dir))
      if (e.is_regular_file() && e.path().extension() == ".idx")
        found.push_back((e.path().parent_path() / e.path().stem()).string());
    std::sort(found.begin(), found.end());
    if (found.size() == 1) return found[0];
    if (found.size() > 1)
      UNILLM_THROW(ConfigError, "[data] input_dir '", input_dir, "' holds ", found.size(),
                   " corpora (", found[0], ".idx, ", found[1],
                   ".idx, ...); give one PREFIX (mixing weighted corpora is not implemented yet)");
  }
  UNILLM_THROW(ConfigError, "[data] input_dir '", input_dir, "': no ", input_dir,
               ".idx and no directory holding one; make it with `unillm preprocess --model DIR "
               "--input FILE --output ",
               input_dir, "`");
}

CorpusRows::CorpusRows(std::shared_ptr<const TokenCorpus> corpus, int64_t begin, int64_t end,
                       const CorpusRowOptions& opts)
    : c_(std::move(corpus)), begin_(begin), end_(end), o_(opts) {
  UNILLM_CHECK(o_.block >= 1 && o_.group >= 1 && begin_ >= 0 && begin_ <= end_ &&
               end_ <= c_->num_docs());
  if (!o_.packing) {  // one row per document
    rows_ = end_ - begin_;
    const int64_t extra = 1 + (o_.bos >= 0 ? 1 : 0);
    for (int64_t d = begin_; d < end_; ++d)
      tokens_ += std::min(c_->doc_length(d) + extra, o_.block);
    return;
  }
  // A group's stream is its documents' tokens plus one EOS each: only the offsets at the group's
  // two ends are needed to count its blocks.
  for (int64_t g0 = begin_; g0 < end_; g0 += o_.group) {
    const int64_t g1 = std::min(end_, g0 + o_.group);
    const int64_t stream = c_->doc_offset(g1) - c_->doc_offset(g0) + (g1 - g0);
    group_first_row_.push_back(rows_);
    rows_ += stream / o_.block;
  }
  group_first_row_.push_back(rows_);
  tokens_ = rows_ * o_.block;
}

int64_t CorpusRows::row_length(int64_t r) const {
  UNILLM_CHECK(r >= 0 && r < rows_, "row ", r, " of ", rows_);
  if (o_.packing) return o_.block;
  return std::min(c_->doc_length(begin_ + r) + 1 + (o_.bos >= 0 ? 1 : 0), o_.block);
}

void CorpusRows::read_row(int64_t r, int32_t* out) const {
  UNILLM_CHECK(r >= 0 && r < rows_, "row ", r, " of ", rows_);
  if (o_.packing) return read_block(r, out);
  const int64_t d = begin_ + r, len = row_length(r);
  int64_t k = 0;
  if (o_.bos >= 0) out[k++] = o_.bos;
  const int64_t n = std::min(c_->doc_length(d), len - k);
  c_->copy_tokens(c_->doc_offset(d), n, out + k);
  k += n;
  if (k < len) out[k] = o_.eos;
}

// Block r of its group's stream: the document holding the block's first token is found by
// binary search over the documents' stream starts s(j) = (offset(j) - offset(g0)) + (j - g0),
// which strictly increase (every document contributes at least its EOS).
void CorpusRows::read_block(int64_t r, int32_t* out) const {
  const auto it = std::upper_bound(group_first_row_.begin(), group_first_row_.end() - 1, r);
  const int64_t g = (it - group_first_row_.begin()) - 1;
  const int64_t g0 = begin_ + g * o_.group, g1 = std::min(end_, g0 + o_.group);
  const int64_t base = c_->doc_offset(g0);
  const int64_t pos = (r - group_first_row_[g]) * o_.block;
  auto start = [&](int64_t j) { return c_->doc_offset(j) - base + (j - g0); };
  int64_t lo = g0, hi = g1 - 1;  // the last j with start(j) <= pos
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (start(mid) <= pos)
      lo = mid;
    else
      hi = mid - 1;
  }
  int64_t j = lo, q = pos - start(lo), k = 0;
  while (k < o_.block) {
    UNILLM_CHECK(j < g1, "block ", r, " runs past its packing group");
    const int64_t n = std::min(c_->doc_length(j) - q, o_.block - k);
    c_->copy_tokens(c_->doc_offset(j) + q, n, out + k);
    k += n;
    if (k < o_.block) out[k++] = o_.eos;
    ++j;
    q = 0;
  }
  if (o_.bos >= 0) out[0] = o_.bos;
}

namespace {

void check_keys(const DataOptions& opts) {
  auto refuse = [&](const char* key, const char* instead) {
    UNILLM_THROW(ConfigError, "[data] ", key, " cannot be used with input_dir (", instead, ")");
  };
  if (!opts.dataset.empty()) refuse("dataset", "give one source of training data");
  if (!opts.eval_dataset.empty())
    refuse("eval_dataset", "the evaluation set is split's second part");
  if (opts.val_size > 1e-6) refuse("val_size", "use split, e.g. 949,50,1");
  if (opts.max_samples) refuse("max_samples", "preprocess fewer documents instead");
  if (opts.cutoff_len < 1) UNILLM_THROW(ConfigError, "[data] cutoff_len must be >= 1");
}

void check_tokenizer(const TokenCorpus& c, const io::Tokenizer& tok, const std::string& input_dir) {
  const CorpusMeta& m = c.meta();
  if (m.vocab_size != tok.vocab_size() || m.fingerprint != tokenizer_fingerprint(tok))
    UNILLM_THROW(ConfigError, "[data] input_dir '", input_dir, "': ", c.prefix(),
                 ".idx was made with another tokenizer (vocab ", m.vocab_size, ", this model's ",
                 tok.vocab_size(), m.vocab_size == tok.vocab_size() ? ", different tokens" : "",
                 "); preprocess it again with --model set to this model");
}

// The block semantics of raw-text pretraining (docs/corpora.md).
CorpusRowOptions row_options(const DataOptions& opts, const io::Tokenizer& tok) {
  CorpusRowOptions ro;
  ro.block = opts.cutoff_len;
  ro.packing = opts.packing;
  ro.group = opts.preprocessing_batch_size;
  ro.eos = pretrain_eos_id(opts, tok);
  ro.bos = tok.adds_bos() ? tok.bos_id() : -1;
  return ro;
}

}  // namespace

TokenizedDataset load_corpus_test_rows(const DataOptions& opts, const io::Tokenizer& tok) {
  std::shared_ptr<const TokenCorpus> corpus = TokenCorpus::open(resolve_corpus_prefix(opts.input_dir));
  check_tokenizer(*corpus, tok, opts.input_dir);
  const auto test = split_ranges(parse_split(opts.split), corpus->num_docs())[2];
  TokenizedDataset rows;
  rows.documents = test.second - test.first;
  if (rows.documents > 0)
    rows.source = std::make_shared<CorpusRows>(corpus, test.first, test.second, row_options(opts, tok));
  return rows;
}

std::pair<TokenizedDataset, TokenizedDataset> load_corpus_data(const DataOptions& opts,
                                                               const io::Tokenizer& tok) {
  check_keys(opts);
  const std::array<double, 3> w = parse_split(opts.split);
  const std::string prefix = resolve_corpus_prefix(opts.input_dir);
  std::shared_ptr<const TokenCorpus> corpus = TokenCorpus::open(prefix);
  check_tokenizer(*corpus, tok, opts.input_dir);
  const CorpusRowOptions ro = row_options(opts, tok);
  const auto ranges = split_ranges(w, corpus->num_docs());
  TokenizedDataset train, eval;
  train.documents = ranges[0].second - ranges[0].first;
  eval.documents = ranges[1].second - ranges[1].first;
  train.source = std::make_shared<CorpusRows>(corpus, ranges[0].first, ranges[0].second, ro);
  if (eval.documents > 0)
    eval.source = std::make_shared<CorpusRows>(corpus, ranges[1].first, ranges[1].second, ro);
  if (train.num_rows() == 0) {
    if (opts.packing)
      UNILLM_THROW(DataError, "[data] input_dir '", opts.input_dir,
                   "': not enough data for one block of ", opts.cutoff_len, " tokens (",
                   train.documents, " training documents of ", corpus->num_docs(), "; split ",
                   opts.split, "); add data or lower cutoff_len");
    UNILLM_THROW(DataError, "[data] input_dir '", opts.input_dir,
                 "': the train split holds no documents (", corpus->num_docs(),
                 " documents, split ", opts.split, ")");
  }
  return {std::move(train), std::move(eval)};
}

}  // namespace unillm::data
