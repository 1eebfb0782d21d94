// The supervised (SFT) example encoder: a conversation rendered through a chat template into
// input ids and labels with LLaMA-Factory's truncation and masking rules
// (SupervisedDatasetProcessor._encode_data_example, data/processor/supervised.py).
#pragma once

#include <cstdint>
#include <vector>

#include "data/conversation.h"
#include "data/pretrain.h"  // kIgnoreIndex
#include "data/template.h"

namespace unillm::data {


struct SupervisedOptions {
  int64_t cutoff_len = 2048;     // the encoded example never exceeds this many tokens
  bool train_on_prompt = false;  // score the prompt tokens too (not with efficient_eos templates)
  bool mask_history = false;     // score the last turn only; turns are kept newest first
};

// input_ids and labels have equal length ≤ cutoff_len. labels are unshifted (HF convention: the
// model shifts), kIgnoreIndex where not scored.
struct SupervisedExample {
  std::vector<int32_t> input_ids, labels;
};

// Rules (LLaMA-Factory): the turns of t.encode_multiturn (with mask_history, newest first and,
// for reasoning templates, earlier thoughts dropped) are taken while the running length is below
// cutoff_len (it starts at 1 for efficient_eos templates, for the final EOS); each turn's
// remaining budget is split between prompt and response by infer_seqlen and both are truncated at
// the end. Prompt labels are kIgnoreIndex (the prompt ids with train_on_prompt; for efficient_eos
// templates the first prompt label of every turn after the first is EOS, which scores the
// previous response's end). Response labels are the response ids (kIgnoreIndex for all but the
// newest turn with mask_history). efficient_eos templates append EOS to both at the end.
// Throws DataError naming c.source for an odd message count or roles out of order, ConfigError
// for train_on_prompt with an efficient_eos template.
SupervisedExample encode_supervised(const Conversation& c, const ChatTemplate& t,
                                    const SupervisedOptions& o);

// LLaMA-Factory's infer_seqlen: the (source, target) lengths kept of a turn when cutoff_len
// tokens remain.
std::pair<int64_t, int64_t> infer_seqlen(int64_t source_len, int64_t target_len,
                                         int64_t cutoff_len);

}  // namespace unillm::data
