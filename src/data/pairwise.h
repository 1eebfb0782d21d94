// Pairwise (reward-model / DPO) data end to end, LLaMA-Factory's PairwiseDatasetProcessor
// (data/processor/pairwise.py): ranking datasets read (preference_reader.h), each example encoded
// into a chosen row and a rejected row over the same prompt, kept side by side (rows 2e, 2e+1;
// TokenizedDataset::group = 2) through the val_size split and the loader.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "data/preference_reader.h"
#include "data/pretrain.h"  // TokenizedDataset, kIgnoreIndex
#include "data/sft.h"       // SftOptions
#include "data/template.h"

namespace unillm::data {

// One example's two rows; ids and labels of a row have equal length ≤ cutoff_len. Labels are
// unshifted (the model shifts), kIgnoreIndex over the prompt.
struct PairwiseExample {
  std::vector<int32_t> chosen_ids, chosen_labels;
  std::vector<int32_t> rejected_ids, rejected_labels;
};

// LLaMA-Factory's _encode_data_example: prompt_ids, chosen = t.encode_oneturn(prompt + [chosen]);
// rejected from prompt + [rejected] (its prompt part is the same); efficient_eos templates append
// t.eos_id() to both responses; (source_len, target_len) = infer_seqlen(|prompt|,
// max(|chosen|, |rejected|), cutoff_len) (sft_encode.h); the prompt is cut to source_len and each
// response to target_len (on the right); row = prompt + response, labels = kIgnoreIndex ×
// source_len + response. Throws DataError naming ex.source when the template refuses the
// messages (roles out of order), NotImplemented for function-call turns.
PairwiseExample encode_pairwise(const PreferenceExample& ex, const ChatTemplate& t,
                                int64_t cutoff_len);

// Returns (train, eval) with group = 2: rows 2e, 2e+1 are example e's chosen and rejected rows,
// with labels. o.stage is "rm" or "dpo" (ConfigError otherwise): o.data.dataset (and eval_dataset)
// resolve for that stage (ranking: true), are read (max_samples, skip_bad_records per dataset as
// in sft) and encoded with o.data.cutoff_len; val_size then splits by examples with
// split_val_examples (sft.h, LLaMA-Factory's seed semantics). Packing is refused (ConfigError
// "packing is not applicable to stage dpo"; LLaMA-Factory never packs pairs): callers pass
// packing as the user set it (LLaMA-Factory's default is off for every stage but pt), and
// neat_packing / the PaddleNLP fields must be unset. Throws ConfigError / DataError naming the
// file and line, DataError when no example results.
std::pair<TokenizedDataset, TokenizedDataset> load_pairwise_data(const SftOptions& o,
                                                                 const io::Tokenizer& tok,
                                                                 const ChatTemplate& t);

}  // namespace unillm::data
