// Supervised fine-tuning data end to end (stage sft): LLaMA-Factory datasets (alpaca / sharegpt
// through dataset_info.json) or PaddleNLP {src,tgt} files, each record rendered to input ids and
// labels, optionally packed, then split for evaluation as LLaMA-Factory does (after
// preprocessing, on the processed rows).
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "data/jinja_template.h"  // kJinjaTemplateName
#include "data/pretrain.h"
#include "data/template.h"

namespace unillm::data {

struct SftOptions {
  // datasets, dataset_dir, cutoff_len (the training::data_cutoff_len()), packing, max_samples,
  // val_size, seed, preprocessing_batch_size, skip_bad_records.
  DataOptions data;
  // "sft" for load_sft_data; "rm" or "dpo" for load_pairwise_data (data/pairwise.h), which
  // resolves its datasets for that stage. load_sft_data does not read it.
  std::string stage = "sft";
  bool train_on_prompt = false;
  bool mask_history = false;
  bool neat_packing = false;  // with packing: samples kept apart (segment ids)
  int32_t pad_id = 0;         // for packed rows
  // PaddleNLP {src,tgt} data (used when dataset_name_or_path is set): DIR/train.json and
  // DIR/dev.json; src_length / max_length truncation; zero_padding packing.
  std::string dataset_name_or_path;
  int64_t src_length = 1024, max_length = 2048;
  bool zero_padding = false;
};

// Returns (train, eval) rows with labels (and positions/segments when packed). tmpl renders the
// conversations; for PaddleNLP data it may be nullptr: src + tgt + EOS as PaddleNLP renders
// without a chat template. Throws ConfigError / DataError naming the file and line.
std::pair<TokenizedDataset, TokenizedDataset> load_sft_data(const SftOptions& opts,
                                                            const io::Tokenizer& tok,
                                                            const ChatTemplate* tmpl);

// LLaMA-Factory's val_size split of processed data (split_dataset → train_test_split, split.h),
// by examples: the permutation runs over train.num_examples() and an example's train.group rows
// move together, in order. eval gets the first n_test examples of the permutation and train the
// rest, both in permutation order; eval.group = train.group; train.tags (one per example, when
// set) follow their examples; train keeps documents and the skip counters. Throws DataError as
// split_sizes does (an empty part).
void split_val_examples(TokenizedDataset& train, TokenizedDataset& eval, double val_size,
                        uint64_t seed);

struct TemplateChoice {
  std::string name;
  TemplateOptions options;  // the Jinja's default system prompt when chosen from it
  std::string model_dir;    // where the chat_template is read from, for name "jinja"
};
// The template to render with, as LLaMA-Factory chooses it: `requested` when given ("jinja" =
// the model's own chat_template, ConfigError when it has none); else the named equivalent of
// tokenizer_config.json's Jinja chat_template (with that Jinja's default system prompt); "jinja"
// when that Jinja maps to no built-in row (rendered as transformers does, JinjaChatTemplate);
// "empty" when the model has none.
TemplateChoice choose_template(const std::string& requested, const std::string& model_dir);
// The chosen template bound to tok (which must outlive it): ChatTemplate::by_name, or the model's
// own Jinja for "jinja". options as by_name's (the caller merges choice.options into them).
std::unique_ptr<ChatTemplate> make_chat_template(const TemplateChoice& choice,
                                                 const io::Tokenizer& tok,
                                                 const TemplateOptions& options);
// True when the model dir's tokenizer_config.json has a chat_template.
bool has_chat_template(const std::string& model_dir);

// PaddleNLP's rendering without a chat template (llm/utils/data.py tokenize_example): the first
// round only; source = [BOS] + src tokens truncated on the left to src_length; target = tgt tokens
// truncated on the right to max_length - |source|, + EOS unless truncated; labels mask the source.
std::pair<std::vector<int32_t>, std::vector<int32_t>> encode_src_tgt_plain(
    const std::string& src, const std::string& tgt, const io::Tokenizer& tok, int64_t src_length,
    int64_t max_length);

}  // namespace unillm::data
