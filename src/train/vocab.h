// The training tokenizer and vocabulary growth, as LLaMA-Factory's patch_tokenizer (add_tokens,
// add_special_tokens), its template fix (fix_special_tokens: missing stop words become special
// tokens) and resize_embedding_layer; and which modules LoRA trains in full (modules_to_save).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/rng.h"
#include "io/tokenizer.h"
#include "models/causal_lm.h"
#include "models/model_config.h"
#include "train/args.h"

namespace unillm::train {

struct TrainingTokenizer {
  std::unique_ptr<io::Tokenizer> tokenizer;
  std::vector<std::string> notes;  // one line per change, for the run log
};

// Loads the tokenizer in dir and adds a.add_tokens (non-special), a.add_special_tokens (special),
// then the tokens a.template_name's stop words need (replace_eos: the first becomes the EOS when
// it is new; the others additional special tokens; "<|endoftext|>" as EOS for a tokenizer
// without one). When the tokenizer then outgrows config's vocab_size and wants_resize(a) is false:
// ConfigError naming the added tokens and the key that grows the model (resize_vocab: true).
TrainingTokenizer load_training_tokenizer(const std::string& dir, const TrainArgs& a,
                                          const models::ModelConfig& config,
                                          const std::string& config_path);

// LLaMA-Factory's resize_vocab after patch_tokenizer: given, or implied by add_tokens /
// add_special_tokens (it turns resize_vocab on when they add a token).
bool wants_resize(const TrainArgs& a);

// When wants_resize(a): models::resize_token_embeddings to the tokenizer's size, the rows of
// add_tokens + add_special_tokens initialised to the noisy mean (seeded by a.seed), or with
// init_special_tokens desc_init[_w_noise] the described ones from their descriptions. Returns a
// line for the log ("" when nothing changed).
std::string grow_vocab(models::CausalLM& model, const io::Tokenizer& tokenizer, const TrainArgs& a);

// PEFT modules_to_save for LoRA: a.additional_target, else {embed_tokens, lm_head} when
// wants_resize(a) (LLaMA-Factory's adapter.py), else none.
std::vector<std::string> modules_to_save(const TrainArgs& a);

// The tokenizer files of the run's output: tokenizer_dir's files with the tokens the run added
// (load_training_tokenizer again, so the saved ids are the trained ones), or a plain copy.
// model_rows: the base model's vocab_size, as load_training_tokenizer was given it.
void save_training_tokenizer(const std::string& tokenizer_dir, const TrainArgs& a,
                             int64_t model_rows, const std::string& dst_dir);

}  // namespace unillm::train
