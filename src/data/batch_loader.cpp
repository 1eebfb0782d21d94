// BatchLoader: deterministic per-epoch permutation, padding, resume state.
#include "data/batch_loader.h"

#include <algorithm>

#include "core/error.h"
#include "core/rng.h"
#include "data/error.h"

namespace unillm::data {

namespace {

uint64_t bounded(Rng& rng, uint64_t bound) {
  const uint64_t threshold = (0 - bound) % bound;  // (2^64 - bound) mod bound
  for (;;) {
    uint64_t r = rng.next_u64();
    if (r >= threshold) return r % bound;
  }
}

// The optional per-row vectors must be absent or one per row, of the row's length.
void check_row_fields(const TokenizedDataset& d, const std::vector<int64_t>& rows) {
  const std::pair<const char*, const std::vector<std::vector<int32_t>>*> fields[] = {
      {"labels", &d.labels}, {"position_ids", &d.position_ids}, {"segment_ids", &d.segment_ids}};
  for (const auto& [name, f] : fields) {
    if (f->empty()) continue;
    if (d.source)
      throw DataError(UNILLM_MSG("[data] a dataset read from a token corpus carries no ", name));
    if (f->size() != d.rows.size())
      throw DataError(UNILLM_MSG("[data] ", f->size(), " rows of ", name, " for ", d.rows.size(),
                                 " rows of ids"));
    for (int64_t r : rows)
      if ((*f)[r].size() != d.rows[r].size())
        throw DataError(UNILLM_MSG("[data] row ", r, " has ", d.rows[r].size(), " ids but ",
                                   (*f)[r].size(), " ", name));
  }
}

// Tags are absent or one per example.
void check_tags(const TokenizedDataset& d) {
  if (!d.tags.empty() && static_cast<int64_t>(d.tags.size()) != d.num_examples())
    throw DataError(UNILLM_MSG("[data] ", d.tags.size(), " tags for ", d.num_examples(),
                               " examples (expected one per example)"));
}

// Row indices of grouped data must be group_rows' layout: B/g example rows per member, member k
// of the same examples in the same order.
void check_group_layout(const TokenizedDataset& d, const std::vector<int64_t>& rows) {
  const int64_t g = d.group, n = static_cast<int64_t>(rows.size());
  if (g == 1) return;
  bool ok = n % g == 0;
  for (int64_t i = 0; ok && i < n / g; ++i)
    for (int64_t k = 0; ok && k < g; ++k)
      ok = rows[k * (n / g) + i] == rows[i] + k && rows[i] % g == 0;
  if (!ok)
    UNILLM_THROW(ConfigError, "[data] rows of grouped data (", g,
                 " rows per example) must come in group_rows' layout");
}

void fill_row(const TokenizedDataset& d, int64_t r, int64_t i, const LoaderOptions& opts,
              Batch& b) {
  const int64_t base = i * b.seq_len;
  const int64_t n = b.lengths[i];
  const int32_t* row = b.input_ids.data() + base;
  d.read_row(r, b.input_ids.data() + base);
  for (int64_t t = 0; t < n; ++t) {
    if (!d.labels.empty())
      b.labels[base + t] = d.labels[r][t];
    else if (!(opts.mask_label_id && row[t] == *opts.mask_label_id))
      b.labels[base + t] = row[t];
  }
  if (!d.position_ids.empty()) {
    const auto& pos = d.position_ids[r];
    int32_t next = n > 0 ? pos[n - 1] + 1 : 0;
    for (int64_t t = 0; t < b.seq_len; ++t) b.position_ids[base + t] = t < n ? pos[t] : next++;
  }
  if (!d.segment_ids.empty())
    std::copy(d.segment_ids[r].begin(), d.segment_ids[r].end(), b.segment_ids.begin() + base);
}

// v1's dynamic_padding_free (_pack_padding_free_samples): the rows laid end to end in one row,
// each its own segment (attention within it) with its own positions, and the first label of
// every row after the first ignored, so no row is scored on a token of the row before. Each row
// is read on its own (not padded to the longest first).
Batch pack_rows(const TokenizedDataset& data, const std::vector<int64_t>& rows, const LoaderOptions& opts) {
  LoaderOptions alone = opts;
  alone.pad_to_multiple_of = 1;
  Batch b;
  b.rows = 1;
  b.group = data.group;
  b.row_indices = rows;
  int32_t segments = 0;  // segments of the rows before (a packed row has several)
  for (size_t r = 0; r < rows.size(); ++r) {
    const Batch row = make_batch(data, {rows[r]}, alone);
    b.tags.insert(b.tags.end(), row.tags.begin(), row.tags.end());
    const int64_t n = row.lengths[0];
    int32_t last_segment = 0;
    for (int64_t t = 0; t < n; ++t) {
      b.input_ids.push_back(row.input_ids[t]);
      b.labels.push_back(r > 0 && t == 0 ? kIgnoreIndex : row.labels[t]);
      b.position_ids.push_back(row.position_ids.empty() ? static_cast<int32_t>(t) : row.position_ids[t]);
      const int32_t seg = row.segment_ids.empty() ? 1 : row.segment_ids[t];
      b.segment_ids.push_back(segments + seg);
      last_segment = std::max(last_segment, seg);
    }
    segments += last_segment;
  }
  b.seq_len = static_cast<int64_t>(b.input_ids.size());
  b.lengths = {static_cast<int32_t>(b.seq_len)};
  const int64_t m = std::max<int64_t>(opts.pad_to_multiple_of, 1);
  for (int32_t next = b.position_ids.empty() ? 0 : b.position_ids.back() + 1; b.seq_len % m != 0; ++b.seq_len) {
    b.input_ids.push_back(opts.pad_id);
    b.labels.push_back(kIgnoreIndex);
    b.position_ids.push_back(next++);
    b.segment_ids.push_back(0);
  }
  return b;
}

}  // namespace

int64_t Batch::num_label_tokens() const {
  return static_cast<int64_t>(
      std::count_if(labels.begin(), labels.end(), [](int32_t l) { return l != kIgnoreIndex; }));
}

BatchLoader::BatchLoader(const TokenizedDataset& data, const LoaderOptions& opts)
    : data_(data), opts_(opts) {
  if (opts.batch_size < 1) UNILLM_THROW(ConfigError, "[data] batch size must be >= 1");
  if (data.num_rows() == 0) UNILLM_THROW(ConfigError, "[data] the training dataset is empty");
  if (data.group != 1 && data.group != 2)
    UNILLM_THROW(ConfigError, "[data] dataset group ", data.group, " (expected 1 or 2)");
  if (data.num_rows() % data.group != 0)
    throw DataError(
        UNILLM_MSG("[data] ", data.num_rows(), " rows do not form whole groups of ", data.group));
  if (opts.token_budget > 0 && (opts.length_group > 0 || (data.group != 1 && opts.budget_by_sum)))
    UNILLM_THROW(ConfigError, "[data] batches by a token budget take the examples in the epoch's order (not ",
                 opts.length_group > 0 ? "group_by_length" : "pairs packed into one row", ")");
  std::vector<int64_t> all(data.source ? 0 : data.rows.size());  // a corpus has no row fields
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
  check_row_fields(data, all);
  check_tags(data);
}

int64_t BatchLoader::batches_per_epoch() const {
  if (opts_.token_budget > 0) {
    load_epoch(state_.epoch);
    return static_cast<int64_t>(bounds_.size()) - 1;
  }
  const int64_t n = data_.num_examples();
  return (n + opts_.batch_size - 1) / opts_.batch_size;
}

void BatchLoader::load_epoch(int64_t e) const {
  if (order_epoch_ == e) return;
  order_ = epoch_order(e);
  order_epoch_ = e;
  bounds_.assign(1, 0);
  if (opts_.token_budget <= 0) return;
  // v1's _get_dynamic_micro_batch_sizes / _get_dynamic_padding_free_micro_batch_sizes: an example
  // joins the batch while the batch stays within the budget; the first always does. A pair's
  // length is its two rows' (v1 concatenates chosen and rejected into one sample).
  const auto n = static_cast<int64_t>(order_.size());
  const int64_t g = data_.group;
  auto length = [&](int64_t e) {
    int64_t len = 0;
    for (int64_t m = 0; m < g; ++m) len += data_.row_length(e * g + m);
    return len;
  };
  int64_t i = 0;
  while (i < n) {
    int64_t used = 0, longest = 0, sum = 0;
    while (i + used < n) {
      const int64_t len = length(order_[i + used]);
      const int64_t cost = opts_.budget_by_sum ? sum + len : std::max(longest, len) * (used + 1);
      if (used > 0 && cost > opts_.token_budget) break;
      longest = std::max(longest, len);
      sum += len;
      ++used;
    }
    i += used;
    bounds_.push_back(i);
  }
}

std::vector<int64_t> BatchLoader::epoch_order(int64_t epoch) const {
  const int64_t n = data_.num_examples();
  std::vector<int64_t> a(n);
  for (int64_t i = 0; i < n; ++i) a[i] = i;
  if (!opts_.shuffle) return a;
  Rng rng(opts_.seed + 0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(epoch + 1));
  for (int64_t i = n - 1; i >= 1; --i) {
    int64_t j = static_cast<int64_t>(bounded(rng, static_cast<uint64_t>(i) + 1));
    std::swap(a[i], a[j]);
  }
  if (opts_.length_group > 0) group_by_length(a);
  return a;
}

// HF's get_length_grouped_indices over the shuffled order (LoaderOptions::length_group).
void BatchLoader::group_by_length(std::vector<int64_t>& order) const {
  const auto n = static_cast<int64_t>(order.size());
  const int64_t g = data_.group;
  std::vector<int64_t> len(static_cast<size_t>(n), 0);
  for (int64_t e = 0; e < n; ++e)
    for (int64_t m = 0; m < g; ++m) len[e] += data_.row_length(e * g + m);
  const int64_t mult = std::max<int64_t>(1, std::min<int64_t>(n / (opts_.length_group * 4), 50));
  const int64_t mega = mult * opts_.length_group;
  auto longer = [&](int64_t x, int64_t y) { return len[x] > len[y]; };
  int64_t best = 0;  // the megabatch whose first (longest) example is the longest of all
  for (int64_t b = 0; b < n; b += mega) {
    std::stable_sort(order.begin() + b, order.begin() + std::min(n, b + mega), longer);
    if (len[order[b]] > len[order[best]]) best = b;
  }
  std::swap(order[0], order[best]);
}

Batch BatchLoader::next() {
  load_epoch(state_.epoch);
  const int64_t n = static_cast<int64_t>(order_.size());
  int64_t begin = state_.batch_index * opts_.batch_size;
  int64_t end = std::min(n, begin + opts_.batch_size);
  if (opts_.token_budget > 0) begin = bounds_[state_.batch_index], end = bounds_[state_.batch_index + 1];
  std::vector<int64_t> examples(order_.begin() + begin, order_.begin() + end);
  if (++state_.batch_index == batches_per_epoch()) state_ = {state_.epoch + 1, 0};
  const std::vector<int64_t> rows = group_rows(data_, examples);
  return opts_.token_budget > 0 && opts_.budget_by_sum ? pack_rows(data_, rows, opts_) : make_batch(data_, rows, opts_);
}

void BatchLoader::restore(const LoaderState& s) {
  if (s.epoch >= 0 && opts_.token_budget > 0) load_epoch(s.epoch);
  const int64_t batches = opts_.token_budget > 0 ? static_cast<int64_t>(bounds_.size()) - 1 : batches_per_epoch();
  if (s.epoch < 0 || s.batch_index < 0 || s.batch_index >= batches)
    UNILLM_THROW(ConfigError, "[data] loader state (epoch ", s.epoch, ", batch ", s.batch_index,
                 ") does not fit this dataset (", batches, " batches in that epoch)");
  state_ = s;
}

Batch make_batch(const TokenizedDataset& data, const std::vector<int64_t>& row_indices,
                 const LoaderOptions& opts) {
  for (int64_t r : row_indices)
    if (r < 0 || r >= data.num_rows())
      UNILLM_THROW(ConfigError, "[data] row ", r, " out of range (", data.num_rows(), " rows)");
  check_row_fields(data, row_indices);
  check_group_layout(data, row_indices);
  check_tags(data);
  Batch b;
  b.rows = static_cast<int64_t>(row_indices.size());
  b.group = data.group;
  for (int64_t r : row_indices) {
    b.lengths.push_back(static_cast<int32_t>(data.row_length(r)));
    b.seq_len = std::max<int64_t>(b.seq_len, b.lengths.back());
  }
  if (opts.pad_to_multiple_of > 1)
    b.seq_len = (b.seq_len + opts.pad_to_multiple_of - 1) / opts.pad_to_multiple_of * opts.pad_to_multiple_of;
  b.input_ids.assign(b.rows * b.seq_len, opts.pad_id);
  b.labels.assign(b.rows * b.seq_len, kIgnoreIndex);
  if (!data.position_ids.empty()) b.position_ids.assign(b.rows * b.seq_len, 0);
  if (!data.segment_ids.empty()) b.segment_ids.assign(b.rows * b.seq_len, 0);
  b.row_indices = row_indices;
  if (!data.tags.empty())  // member 0 of each example comes first, in example order
    for (int64_t i = 0; i < b.rows / data.group; ++i)
      b.tags.push_back(data.tags[row_indices[i] / data.group]);
  for (int64_t i = 0; i < b.rows; ++i) fill_row(data, row_indices[i], i, opts, b);
  return b;
}

std::vector<int64_t> group_rows(const TokenizedDataset& data,
                                const std::vector<int64_t>& examples) {
  const int64_t g = data.group, n = data.num_examples();
  for (int64_t e : examples)
    if (e < 0 || e >= n)
      UNILLM_THROW(ConfigError, "[data] example ", e, " out of range (", n, " examples)");
  std::vector<int64_t> rows;
  rows.reserve(examples.size() * static_cast<size_t>(g));
  for (int64_t k = 0; k < g; ++k)
    for (int64_t e : examples) rows.push_back(e * g + k);
  return rows;
}

std::vector<int64_t> group_rows(const TokenizedDataset& data, int64_t first_example,
                                int64_t count) {
  if (first_example < 0 || count < 0 || first_example + count > data.num_examples())
    UNILLM_THROW(ConfigError, "[data] examples [", first_example, ", ", first_example + count,
                 ") out of range (", data.num_examples(), " examples)");
  std::vector<int64_t> examples(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) examples[i] = first_example + i;
  return group_rows(data, examples);
}

}  // namespace unillm::data
