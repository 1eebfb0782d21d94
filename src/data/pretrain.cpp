// Pretraining dataset construction (see pretrain.h for the rules).
#include "data/pretrain.h"

#include <algorithm>
#include <tuple>

#include "core/error.h"
#include "data/corpus_data.h"
#include "data/dataset_info.h"
#include "data/mix.h"
#include "data/error.h"
#include "data/num_samples.h"
#include "data/record_reader.h"
#include "data/split.h"

namespace unillm::data {

namespace {

struct Documents {
  std::vector<std::string> texts;
  int64_t skipped = 0;
  std::vector<std::string> skip_messages;
};

Documents read_all(const std::vector<std::string>& names, const DataOptions& opts, NumpyRandomState& rng) {
  Documents d;
  ReadOptions ro{opts.max_samples, opts.skip_bad_records, &rng};
  std::vector<std::vector<std::string>> parts;
  for (const auto& attr : resolve_datasets(names, opts.dataset_dir)) {
    DocumentSet set = read_documents(attr, ro);
    parts.push_back(std::move(set.texts));
    d.skipped += set.skipped_records;
    for (auto& m : set.skip_messages) d.skip_messages.push_back(std::move(m));
  }
  d.texts = mix_datasets(std::move(parts), opts.mix_strategy, opts.interleave_probs, opts.seed);
  return d;
}

std::vector<std::vector<int32_t>> tokenize_all(const std::vector<std::string>& texts,
                                               const io::Tokenizer& tok) {
  std::vector<std::vector<int32_t>> ids(texts.size());
  const io::EncodeOptions eo = pretrain_encode_options();
  const int64_t n = static_cast<int64_t>(texts.size());
#pragma omp parallel for schedule(dynamic, 16)
  for (int64_t i = 0; i < n; ++i) ids[i] = tok.encode(texts[i], eo);
  return ids;
}

TokenizedDataset process(Documents&& docs, const DataOptions& opts, const io::Tokenizer& tok) {
  TokenizedDataset out;
  out.documents = static_cast<int64_t>(docs.texts.size());
  out.skipped_records = docs.skipped;
  out.skip_messages = std::move(docs.skip_messages);
  const int32_t eos = pretrain_eos_id(opts, tok);
  const int32_t bos = tok.adds_bos() ? tok.bos_id() : -1;
  auto ids = tokenize_all(docs.texts, tok);
  if (opts.packing) {
    out.rows = pack_documents(ids, opts.cutoff_len, eos, bos, opts.preprocessing_batch_size);
    return out;
  }
  out.rows.reserve(ids.size());
  for (auto& d : ids) {
    std::vector<int32_t> row;
    row.reserve(d.size() + 2);
    if (bos >= 0) row.push_back(bos);
    row.insert(row.end(), d.begin(), d.end());
    row.push_back(eos);
    if (static_cast<int64_t>(row.size()) > opts.cutoff_len) row.resize(opts.cutoff_len);
    out.rows.push_back(std::move(row));
  }
  return out;
}

}  // namespace

int64_t TokenizedDataset::num_tokens() const {
  if (source) return source->num_tokens();
  int64_t n = 0;
  for (const auto& r : rows) n += static_cast<int64_t>(r.size());
  return n;
}

void append_examples(TokenizedDataset& to, const TokenizedDataset& from) {
  if (to.source || from.source)
    UNILLM_THROW(NotImplemented, "[data] appending rows read from a token corpus is not implemented");
  to.documents += from.documents;
  to.skipped_records += from.skipped_records;
  to.skip_messages.insert(to.skip_messages.end(), from.skip_messages.begin(), from.skip_messages.end());
  if (from.rows.empty()) return;
  if (to.rows.empty()) {
    const auto keep = std::make_tuple(to.documents, to.skipped_records, to.skip_messages);
    to = from;
    std::tie(to.documents, to.skipped_records, to.skip_messages) = keep;
    return;
  }
  if (to.group != from.group)
    UNILLM_THROW(ShapeError, "[data] cannot append examples of ", from.group, " rows to examples of ", to.group);
  // A per-row field one side leaves at its default gets the default written out on that side.
  auto extend = [&](std::vector<std::vector<int32_t>> TokenizedDataset::*field, auto make_default) {
    auto& a = to.*field;
    const auto& b = from.*field;
    if (a.empty() && b.empty()) return;
    if (a.empty())
      for (const auto& r : to.rows) a.push_back(make_default(r));
    if (b.empty())
      for (const auto& r : from.rows) a.push_back(make_default(r));
    else
      a.insert(a.end(), b.begin(), b.end());
  };
  extend(&TokenizedDataset::labels, [](const std::vector<int32_t>& r) { return r; });  // pretraining: the ids
  extend(&TokenizedDataset::position_ids, [](const std::vector<int32_t>& r) {
    std::vector<int32_t> p(r.size());
    for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<int32_t>(i);
    return p;
  });
  extend(&TokenizedDataset::segment_ids, [](const std::vector<int32_t>& r) {  // one segment: the whole row
    return std::vector<int32_t>(r.size(), 1);
  });
  if (!to.tags.empty() || !from.tags.empty()) {
    if (to.tags.empty() || from.tags.empty())
      UNILLM_THROW(ShapeError, "[data] cannot append examples with tags to examples without");
    to.tags.insert(to.tags.end(), from.tags.begin(), from.tags.end());
  }
  to.rows.insert(to.rows.end(), from.rows.begin(), from.rows.end());
}

int64_t TokenizedDataset::num_rows() const {
  return source ? source->size() : static_cast<int64_t>(rows.size());
}

int64_t TokenizedDataset::row_length(int64_t r) const {
  return source ? source->row_length(r) : static_cast<int64_t>(rows[r].size());
}

void TokenizedDataset::read_row(int64_t r, int32_t* out) const {
  if (source) return source->read_row(r, out);
  std::copy(rows[r].begin(), rows[r].end(), out);
}

io::EncodeOptions pretrain_encode_options() {
  io::EncodeOptions eo;
  eo.add_special_tokens = false;
  eo.parse_special = true;
  return eo;
}

int32_t pretrain_eos_id(const DataOptions& opts, const io::Tokenizer& tok) {
  std::string text = opts.eos_token;
  if (text.empty() && opts.template_name == "llama3") text = "<|end_of_text|>";
  if (text.empty()) {
    if (tok.eos_id() < 0)
      UNILLM_THROW(ConfigError, "[data] the tokenizer has no EOS token, which pretraining appends");
    return tok.eos_id();
  }
  auto id = tok.token_to_id(text);
  if (!id) UNILLM_THROW(ConfigError, "[data] EOS token '", text, "' is not in the tokenizer");
  return *id;
}

std::vector<std::vector<int32_t>> pack_documents(const std::vector<std::vector<int32_t>>& docs,
                                                 int64_t block, int32_t eos, int32_t bos,
                                                 int64_t group) {
  UNILLM_CHECK(block >= 1 && group >= 1);
  std::vector<std::vector<int32_t>> rows;
  std::vector<int32_t> stream;
  const size_t n = docs.size();
  for (size_t g = 0; g < n; g += static_cast<size_t>(group)) {
    stream.clear();
    for (size_t i = g; i < std::min(n, g + static_cast<size_t>(group)); ++i) {
      stream.insert(stream.end(), docs[i].begin(), docs[i].end());
      stream.push_back(eos);
    }
    const size_t usable = stream.size() / block * block;  // the remainder is dropped
    for (size_t s = 0; s < usable; s += block) {
      rows.emplace_back(stream.begin() + s, stream.begin() + s + block);
      if (bos >= 0) rows.back()[0] = bos;
    }
  }
  return rows;
}

std::pair<TokenizedDataset, TokenizedDataset> load_pretrain_data(const DataOptions& opts,
                                                                 const io::Tokenizer& tok) {
  if (!opts.input_dir.empty()) return load_corpus_data(opts, tok);
  if (opts.dataset.empty())
    UNILLM_THROW(ConfigError, "[data] no training dataset given ('dataset')");
  if (opts.cutoff_len < 1) UNILLM_THROW(ConfigError, "[data] cutoff_len must be >= 1");
  if (opts.val_size > 1e-6 && !opts.eval_dataset.empty())
    UNILLM_THROW(ConfigError, "[data] val_size cannot be used together with eval_dataset");
  NumpyRandomState rng(opts.seed);  // num_samples' draws: train datasets, then eval ones
  TokenizedDataset train = process(read_all(opts.dataset, opts, rng), opts, tok);
  TokenizedDataset eval;
  if (!opts.eval_dataset.empty()) eval = process(read_all(opts.eval_dataset, opts, rng), opts, tok);
  if (train.rows.empty()) {
    if (opts.packing)
      UNILLM_THROW(DataError, "[data] not enough data for one block of ", opts.cutoff_len,
                   " tokens (", train.documents, " documents); add data or lower cutoff_len");
    UNILLM_THROW(DataError, "[data] the training datasets hold no documents");
  }
  if (opts.val_size > 1e-6) {
    std::vector<std::vector<int32_t>> all = std::move(train.rows), tr, te;
    train_test_split(std::move(all), opts.val_size, opts.seed, tr, te);
    train.rows = std::move(tr);
    eval.rows = std::move(te);
  }
  return {std::move(train), std::move(eval)};
}

}  // namespace unillm::data
