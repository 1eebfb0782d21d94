// Pairwise data: read → encode chosen/rejected rows → split by examples (see pairwise.h).
#include "data/pairwise.h"

#include <algorithm>

#include "core/error.h"
#include "data/dataset_info.h"
#include "data/error.h"
#include "data/num_samples.h"
#include "data/sft_encode.h"  // infer_seqlen

namespace unillm::data {

namespace {

std::vector<Message> with_response(const std::vector<Message>& prompt, const Message& response) {
  std::vector<Message> m = prompt;
  m.push_back(response);
  return m;
}

// The template's encode_oneturn, its DataErrors naming the record.
EncodedTurn encode_oneturn(const ChatTemplate& t, const PreferenceExample& ex,
                           const Message& response) {
  try {
    return t.encode_oneturn(with_response(ex.prompt, response), ex.system);
  } catch (const DataError& e) {
    throw DataError(UNILLM_MSG("[data] ", ex.source, ": ", e.what()));
  }
}

void add_example(TokenizedDataset& out, PairwiseExample&& p) {
  out.rows.push_back(std::move(p.chosen_ids));
  out.labels.push_back(std::move(p.chosen_labels));
  out.rows.push_back(std::move(p.rejected_ids));
  out.labels.push_back(std::move(p.rejected_labels));
}

// Every dataset of names, read and encoded; examples in dataset then record order.
TokenizedDataset read_encode(const std::vector<std::string>& names, const SftOptions& o,
                             const ChatTemplate& t, NumpyRandomState& rng) {
  TokenizedDataset out;
  out.group = 2;
  const ReadOptions ro{o.data.max_samples, o.data.skip_bad_records, &rng};
  for (const DatasetAttr& attr : resolve_datasets(names, o.data.dataset_dir, o.stage)) {
    PreferenceSet set = read_preferences(attr, ro);
    out.documents += static_cast<int64_t>(set.examples.size());
    out.skipped_records += set.skipped_records;
    for (auto& m : set.skip_messages) out.skip_messages.push_back(std::move(m));
    for (const PreferenceExample& ex : set.examples)
      add_example(out, encode_pairwise(ex, t, o.data.cutoff_len));
  }
  return out;
}

void check_options(const SftOptions& o) {
  if (o.stage != "rm" && o.stage != "dpo")
    UNILLM_THROW(ConfigError, "[data] pairwise data is for stages rm and dpo, not '", o.stage, "'");
  if (o.data.packing || o.neat_packing)
    UNILLM_THROW(ConfigError, "[data] ", o.neat_packing ? "neat_packing" : "packing",
                 " is not applicable to stage ", o.stage,
                 " (pairs are never packed; set packing: false)");
  if (!o.dataset_name_or_path.empty())
    UNILLM_THROW(ConfigError, "[data] stage ", o.stage,
                 " reads LLaMA-Factory ranking datasets (dataset:), not dataset_name_or_path");
  if (o.data.dataset.empty())
    UNILLM_THROW(ConfigError, "[data] no training dataset given ('dataset')");
}

}  // namespace

PairwiseExample encode_pairwise(const PreferenceExample& ex, const ChatTemplate& t,
                                int64_t cutoff_len) {
  EncodedTurn chosen = encode_oneturn(t, ex, ex.chosen);
  std::vector<int32_t> rejected = encode_oneturn(t, ex, ex.rejected).response;
  std::vector<int32_t>& prompt = chosen.prompt;
  if (t.efficient_eos()) {
    chosen.response.push_back(t.eos_id());
    rejected.push_back(t.eos_id());
  }
  const int64_t longest = static_cast<int64_t>(std::max(chosen.response.size(), rejected.size()));
  // Plain variables, not a structured binding: clang 14 cannot capture those in the lambda.
  const std::pair<int64_t, int64_t> lens = infer_seqlen(static_cast<int64_t>(prompt.size()), longest, cutoff_len);
  const int64_t target_len = lens.second;
  prompt.resize(lens.first);
  auto row = [&](std::vector<int32_t> response, std::vector<int32_t>& ids,
                 std::vector<int32_t>& labels) {
    if (static_cast<int64_t>(response.size()) > target_len) response.resize(target_len);
    ids = prompt;
    ids.insert(ids.end(), response.begin(), response.end());
    labels.assign(prompt.size(), kIgnoreIndex);
    labels.insert(labels.end(), response.begin(), response.end());
  };
  PairwiseExample out;
  row(std::move(chosen.response), out.chosen_ids, out.chosen_labels);
  row(std::move(rejected), out.rejected_ids, out.rejected_labels);
  return out;
}

std::pair<TokenizedDataset, TokenizedDataset> load_pairwise_data(const SftOptions& o,
                                                                 const io::Tokenizer& tok,
                                                                 const ChatTemplate& t) {
  check_options(o);
  NumpyRandomState rng(o.data.seed);  // num_samples' draws: train datasets, then eval ones
  TokenizedDataset train = read_encode(o.data.dataset, o, t, rng), eval;
  eval.group = 2;
  if (!o.data.eval_dataset.empty()) eval = read_encode(o.data.eval_dataset, o, t, rng);
  if (train.rows.empty())
    UNILLM_THROW(DataError, "[data] the training data holds no usable preference pair");
  if (o.data.val_size > 1e-6) split_val_examples(train, eval, o.data.val_size, o.data.seed);
  return {std::move(train), std::move(eval)};
}

}  // namespace unillm::data
