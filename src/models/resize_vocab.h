// Growing a model's vocabulary for tokens added to its tokenizer, as LLaMA-Factory's
// resize_embedding_layer (model_utils/embedding.py, every init_special_tokens) does through
// transformers' resize_token_embeddings(pad_to_multiple_of=64, mean_resizing=False).
#pragma once

#include <cstdint>
#include <vector>

#include "core/rng.h"
#include "models/causal_lm.h"

namespace unillm::models {

// desc_init: a new token's row and the ids of its description (tokenized without BOS/EOS).
struct DescribedToken {
  int32_t id = -1;
  std::vector<int32_t> description_ids;
};

struct ResizeVocabOptions {
  int64_t tokenizer_size = 0;  // len(tokenizer): the rows the model must have
  std::vector<int32_t>
      new_token_ids;                // LLaMA-Factory's new_tokens (add_tokens + add_special_tokens)
  double initializer_range = 0.02;  // transformers' _init_weights of the grown matrices
  bool noise = true;                // the N(0, 1/sqrt(C)) noise of noise_init (tests turn it off)
  // LLaMA-Factory's init_special_tokens desc_init / desc_init_w_noise (noise: the _w_noise part)
  // when not empty: only these rows are initialised, in this order (see below).
  std::vector<DescribedToken> described;
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
// With `described` (desc_init), LLaMA-Factory's _description_based_initialization replaces the
// noisy mean: each described row of embed_tokens becomes the mean of the embed_tokens rows of its
// description ids that are not new tokens (new_token_ids) and lie inside the matrix (none left:
// the mean of every row but the new tokens'), + N(0, 1/sqrt(C)) when noise; an untied lm_head's
// described rows get the same mean of the *embed_tokens* rows (LLaMA-Factory reads
// get_input_embeddings() for both), its fallback the mean of lm_head's own rows. Other grown
// rows keep their normal init. Noise is drawn token by token, embed_tokens first.
ResizeVocabResult resize_token_embeddings(CausalLM& model, const ResizeVocabOptions& options,
                                          Rng& rng);

// A tied model gets an lm_head of its own (a copy of the embedding), as PEFT's modules_to_save
// copies embed_tokens and lm_head separately. No-op for an untied model.
void untie_embeddings(CausalLM& model);

}  // namespace unillm::models
