// Growing a model's vocabulary for tokens added to its tokenizer, as LLaMA-Factory's
// resize_embedding_layer (model_utils/embedding.py, init_special_tokens: noise_init) does through
// transformers' resize_token_embeddings(pad_to_multiple_of=64, mean_resizing=False).
#pragma once

#include <cstdint>
#include <vector>

#include "core/rng.h"
#include "models/causal_lm.h"

namespace unillm::models {

struct ResizeVocabOptions {
  int64_t tokenizer_size = 0;  // len(tokenizer): the rows the model must have
  std::vector<int32_t>
      new_token_ids;                // LLaMA-Factory's new_tokens (add_tokens + add_special_tokens)
  double initializer_range = 0.02;  // transformers' _init_weights of the grown matrices
  bool noise = true;                // the N(0, 1/sqrt(C)) noise of noise_init (tests turn it off)
};

struct ResizeVocabResult {
  int64_t old_rows = 0, new_rows = 0;
  std::vector<int32_t> initialised;  // rows set to mean (+ noise)
};

// When tokenizer_size > the embedding's rows: embed_tokens (and an untied lm_head) grow to
// tokenizer_size rounded up to a multiple of 64; the grown rows first get transformers'
// _init_weights (normal, std initializer_range), then LLaMA-Factory's noisy mean: the rows of
// new_token_ids (or, when none is given, every grown row) become the mean of all other rows plus
// N(0, 1/sqrt(C)) noise, drawn from rng. new_token_ids inside the existing rows (a padded
// embedding) are initialised the same way without growing. Each matrix is done in f32 on the host
// and put back in its dtype and device. config().vocab_size follows. Nothing to do: {rows, rows}.
ResizeVocabResult resize_token_embeddings(CausalLM& model, const ResizeVocabOptions& options,
                                          Rng& rng);

// A tied model gets an lm_head of its own (a copy of the embedding), as PEFT's modules_to_save
// copies embed_tokens and lm_head separately. No-op for an untied model.
void untie_embeddings(CausalLM& model);

}  // namespace unillm::models
