// Supervised example encoding, following LLaMA-Factory's
// src/llamafactory/data/processor/supervised.py (_encode_data_example) and
// processor/processor_utils.py (infer_seqlen); see sft_encode.h for the rules.
#include "data/sft_encode.h"

#include <algorithm>

#include "core/error.h"
#include "data/error.h"

namespace unillm::data {

std::pair<int64_t, int64_t> infer_seqlen(int64_t source_len, int64_t target_len,
                                         int64_t cutoff_len) {
  int64_t max_target;
  if (target_len * 2 < cutoff_len) {  // the target fits in half: truncate the source
    max_target = cutoff_len;
  } else if (source_len * 2 < cutoff_len) {  // the source fits in half: truncate the target
    max_target = cutoff_len - source_len;
  } else {  // both, in proportion (Python: int(cutoff * (target / (source + target))))
    double share = static_cast<double>(target_len) / static_cast<double>(source_len + target_len);
    max_target = static_cast<int64_t>(static_cast<double>(cutoff_len) * share);
  }
  int64_t new_target = std::min(max_target, target_len);
  int64_t new_source = std::min(std::max<int64_t>(cutoff_len - new_target, 0), source_len);
  return {new_source, new_target};
}

namespace {

void append(std::vector<int32_t>& dst, const std::vector<int32_t>& src, bool front) {
  dst.insert(front ? dst.begin() : dst.end(), src.begin(), src.end());
}

}  // namespace

SupervisedExample encode_supervised(const Conversation& c, const ChatTemplate& t,
                                    const SupervisedOptions& o) {
  if (c.messages.empty() || c.messages.size() % 2 != 0)
    UNILLM_THROW(DataError, "[data] ", c.source, ": a supervised example needs user/assistant ",
                 "pairs ending with the response, got ", c.messages.size(), " messages");
  if (o.train_on_prompt && t.efficient_eos())
    UNILLM_THROW(ConfigError, "[data] template '", t.name(),
                 "' does not support train_on_prompt (its EOS is added by the data processor)");
  const bool efficient = t.efficient_eos();
  std::vector<EncodedTurn> turns =
      t.encode_multiturn(c.messages, c.system, o.mask_history, c.tools);
  if (o.mask_history) std::reverse(turns.begin(), turns.end());  // newest turn first

  SupervisedExample ex;
  int64_t total = efficient ? 1 : 0;  // room for the final EOS
  for (size_t k = 0; k < turns.size() && total < o.cutoff_len; ++k) {
    auto [source_len, target_len] =
        infer_seqlen(static_cast<int64_t>(turns[k].prompt.size()),
                     static_cast<int64_t>(turns[k].response.size()), o.cutoff_len - total);
    std::vector<int32_t> source(turns[k].prompt.begin(), turns[k].prompt.begin() + source_len);
    std::vector<int32_t> target(turns[k].response.begin(), turns[k].response.begin() + target_len);
    total += source_len + target_len;

    std::vector<int32_t> source_labels(source_len, kIgnoreIndex);
    if (o.train_on_prompt)
      source_labels = source;
    else if (efficient && k != 0 && source_len > 0)  // LF writes the EOS even when source_len is
      source_labels[0] = t.eos_id();                 // 0; we keep labels aligned with ids
    std::vector<int32_t> target_labels =
        (o.mask_history && k != 0) ? std::vector<int32_t>(target_len, kIgnoreIndex) : target;

    // With mask_history the turns run newest first, so each one goes before the ones so far.
    std::vector<int32_t> ids = source, labels = source_labels;
    append(ids, target, false);
    append(labels, target_labels, false);
    append(ex.input_ids, ids, o.mask_history);
    append(ex.labels, labels, o.mask_history);
  }
  if (efficient) {
    ex.input_ids.push_back(t.eos_id());
    ex.labels.push_back(t.eos_id());
  }
  return ex;
}

}  // namespace unillm::data
