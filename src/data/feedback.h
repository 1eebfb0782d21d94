// KTO feedback data end to end, LLaMA-Factory's FeedbackDatasetProcessor
// (data/processor/feedback.py): kto_tag datasets read (feedback_reader.h), each example encoded
// into a target row (its prompt + its response) and a KL row (its prompt + another example's
// response), kept side by side (rows 2e, 2e+1; TokenizedDataset::group = 2) with one desirable
// flag per example (TokenizedDataset::tags) through the val_size split and the loader.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "data/feedback_reader.h"
#include "data/pretrain.h"  // TokenizedDataset, kIgnoreIndex
#include "data/sft.h"       // SftOptions
#include "data/template.h"

namespace unillm::data {

// One example's two rows; ids and labels of a row have equal length ≤ cutoff_len. Labels are
// unshifted (the model shifts), kIgnoreIndex over the prompt.
struct FeedbackRows {
  std::vector<int32_t> target_ids, target_labels;
  std::vector<int32_t> kl_ids, kl_labels;
};

// LLaMA-Factory's _encode_data_example: target = t.encode_oneturn(prompt + [response]), KL =
// t.encode_oneturn(prompt + [kl_response]) (ex's prompt and system both times); efficient_eos
// templates append t.eos_id() to both responses; each row gets its own cut, (source_len,
// target_len) = infer_seqlen(|its prompt|, |its response|, cutoff_len) (sft_encode.h), prompt and
// response truncated on the right; row = prompt + response, labels = kIgnoreIndex × source_len +
// response. Throws DataError naming ex.source when the template refuses the messages,
// NotImplemented for function-call turns.
FeedbackRows encode_feedback(const FeedbackExample& ex, const Message& kl_response,
                             const ChatTemplate& t, int64_t cutoff_len);

// Which example lends its response to example i's KL row: LLaMA-Factory's preprocess_dataset
// runs over batches of batch_size consecutive examples (dataset.map(batched=True,
// batch_size=preprocessing_batch_size); the last batch may be shorter) and pairs them by
// `kl_response = [examples["_response"][-1]] + examples["_response"][:-1]`: within a batch
// [b, e), example i takes example i − 1's response and example b takes example e − 1's (a
// batch of one takes its own). Returns [n]. Throws ConfigError when batch_size < 1.
std::vector<int64_t> kl_partners(int64_t n, int64_t batch_size);

// Returns (train, eval) with group = 2: rows 2e, 2e+1 are example e's target and KL rows, with
// labels, and tags[e] = 1 when example e is desirable. o.stage must be "kto" (ConfigError
// otherwise): o.data.dataset (and eval_dataset) resolve for stage kto (columns.kto_tag, not
// ranking), are read (max_samples, skip_bad_records per dataset as in sft), laid end to end in
// dataset order (LLaMA-Factory merges them before preprocessing; train and eval apart), paired by
// kl_partners(n, o.data.preprocessing_batch_size) — skipped records take no place — and encoded
// with o.data.cutoff_len; val_size then splits by examples with split_val_examples (sft.h), tags
// following. Packing is refused (ConfigError "packing is not applicable to stage kto"), as are
// neat_packing and dataset_name_or_path. Throws ConfigError / DataError naming the file and line,
// DataError when no example results.
std::pair<TokenizedDataset, TokenizedDataset> load_feedback_data(const SftOptions& o,
                                                                 const io::Tokenizer& tok,
                                                                 const ChatTemplate& t);

// LLaMA-Factory's "Your dataset only has one preference type." when every tag of d is equal (""
// when both kinds occur or d has no examples), with the counts.
std::string feedback_balance_warning(const TokenizedDataset& d);

}  // namespace unillm::data
