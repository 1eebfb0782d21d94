// Feedback (KTO) data: read → pair with KL responses → encode target/KL rows → split by examples
// (see feedback.h).
#include "data/feedback.h"

#include <algorithm>

#include "core/error.h"
#include "data/dataset_info.h"
#include "data/error.h"
#include "data/num_samples.h"
#include "data/sft_encode.h"  // infer_seqlen

namespace unillm::data {

namespace {

// The template's encode_oneturn on prompt + [response], its DataErrors naming the record.
EncodedTurn encode_oneturn(const ChatTemplate& t, const FeedbackExample& ex,
                           const Message& response) {
  std::vector<Message> messages = ex.prompt;
  messages.push_back(response);
  try {
    return t.encode_oneturn(messages, ex.system);
  } catch (const DataError& e) {
    throw DataError(UNILLM_MSG("[data] ", ex.source, ": ", e.what()));
  }
}

// One row cut by infer_seqlen: prompt + response, labels masked over the prompt.
void cut_row(EncodedTurn turn, int64_t cutoff_len, std::vector<int32_t>& ids,
             std::vector<int32_t>& labels) {
  const auto [source_len, target_len] =
      infer_seqlen(static_cast<int64_t>(turn.prompt.size()),
                   static_cast<int64_t>(turn.response.size()), cutoff_len);
  turn.prompt.resize(source_len);
  turn.response.resize(target_len);
  ids = std::move(turn.prompt);
  ids.insert(ids.end(), turn.response.begin(), turn.response.end());
  labels.assign(source_len, kIgnoreIndex);
  labels.insert(labels.end(), turn.response.begin(), turn.response.end());
}

// Every dataset of names, read; examples in dataset then record order.
FeedbackSet read_all(const std::vector<std::string>& names, const SftOptions& o, NumpyRandomState& rng) {
  FeedbackSet all;
  const ReadOptions ro{o.data.max_samples, o.data.skip_bad_records, &rng};
  for (const DatasetAttr& attr : resolve_datasets(names, o.data.dataset_dir, "kto")) {
    FeedbackSet set = read_feedback(attr, ro);
    all.rows += set.rows;
    all.skipped_records += set.skipped_records;
    for (auto& m : set.skip_messages) all.skip_messages.push_back(std::move(m));
    for (auto& ex : set.examples) all.examples.push_back(std::move(ex));
  }
  return all;
}

TokenizedDataset read_encode(const std::vector<std::string>& names, const SftOptions& o,
                             const ChatTemplate& t, NumpyRandomState& rng) {
  FeedbackSet set = read_all(names, o, rng);
  TokenizedDataset out;
  out.group = 2;
  out.documents = static_cast<int64_t>(set.examples.size());
  out.skipped_records = set.skipped_records;
  out.skip_messages = std::move(set.skip_messages);
  const std::vector<int64_t> partner = kl_partners(out.documents, o.data.preprocessing_batch_size);
  for (int64_t i = 0; i < out.documents; ++i) {
    const FeedbackExample& ex = set.examples[i];
    FeedbackRows r = encode_feedback(ex, set.examples[partner[i]].response, t, o.data.cutoff_len);
    out.rows.push_back(std::move(r.target_ids));
    out.labels.push_back(std::move(r.target_labels));
    out.rows.push_back(std::move(r.kl_ids));
    out.labels.push_back(std::move(r.kl_labels));
    out.tags.push_back(ex.desirable ? 1 : 0);
  }
  return out;
}

void check_options(const SftOptions& o) {
  if (o.stage != "kto")
    UNILLM_THROW(ConfigError, "[data] feedback data is for stage kto, not '", o.stage, "'");
  if (o.data.packing || o.neat_packing)
    UNILLM_THROW(ConfigError, "[data] ", o.neat_packing ? "neat_packing" : "packing",
                 " is not applicable to stage kto (target and KL rows are never packed; set "
                 "packing: false)");
  if (!o.dataset_name_or_path.empty())
    UNILLM_THROW(ConfigError,
                 "[data] stage kto reads LLaMA-Factory kto_tag datasets (dataset:), not "
                 "dataset_name_or_path");
  if (o.data.dataset.empty())
    UNILLM_THROW(ConfigError, "[data] no training dataset given ('dataset')");
}

}  // namespace

FeedbackRows encode_feedback(const FeedbackExample& ex, const Message& kl_response,
                             const ChatTemplate& t, int64_t cutoff_len) {
  EncodedTurn target = encode_oneturn(t, ex, ex.response);
  EncodedTurn kl = encode_oneturn(t, ex, kl_response);
  if (t.efficient_eos()) {
    target.response.push_back(t.eos_id());
    kl.response.push_back(t.eos_id());
  }
  FeedbackRows out;
  cut_row(std::move(target), cutoff_len, out.target_ids, out.target_labels);
  cut_row(std::move(kl), cutoff_len, out.kl_ids, out.kl_labels);
  return out;
}

std::vector<int64_t> kl_partners(int64_t n, int64_t batch_size) {
  if (batch_size < 1)
    UNILLM_THROW(ConfigError, "[data] preprocessing_batch_size is ", batch_size, ", expected >= 1");
  std::vector<int64_t> partner(static_cast<size_t>(std::max<int64_t>(n, 0)));
  for (int64_t begin = 0; begin < n; begin += batch_size) {
    const int64_t end = std::min(n, begin + batch_size);
    partner[begin] = end - 1;
    for (int64_t i = begin + 1; i < end; ++i) partner[i] = i - 1;
  }
  return partner;
}

std::pair<TokenizedDataset, TokenizedDataset> load_feedback_data(const SftOptions& o,
                                                                 const io::Tokenizer& /*tok*/,
                                                                 const ChatTemplate& t) {
  check_options(o);
  NumpyRandomState rng(o.data.seed);  // num_samples' draws: train datasets, then eval ones
  TokenizedDataset train = read_encode(o.data.dataset, o, t, rng), eval;
  eval.group = 2;
  if (!o.data.eval_dataset.empty()) eval = read_encode(o.data.eval_dataset, o, t, rng);
  if (train.rows.empty())
    UNILLM_THROW(DataError, "[data] the training data holds no usable feedback example");
  if (o.data.val_size > 1e-6) split_val_examples(train, eval, o.data.val_size, o.data.seed);
  return {std::move(train), std::move(eval)};
}

std::string feedback_balance_warning(const TokenizedDataset& d) {
  const auto desirable = static_cast<int64_t>(std::count(d.tags.begin(), d.tags.end(), 1));
  const int64_t undesirable = static_cast<int64_t>(d.tags.size()) - desirable;
  if (d.tags.empty() || (desirable > 0 && undesirable > 0)) return "";
  return UNILLM_MSG("[data] Your dataset only has one preference type (", desirable, " desirable, ",
                    undesirable, " undesirable examples).");
}

}  // namespace unillm::data
