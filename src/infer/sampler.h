// Token sampling with Hugging Face's logits-processor order: repetition penalty (then OpenAI's
// presence/frequency penalties), temperature, top-k, top-p, min-p; then a draw from the softmax
// (or argmax when temperature is 0).
// Each processor works on a vector of scores in place; removed tokens become -inf.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/rng.h"

namespace unillm::infer {

struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy
  int top_k = 0;  // 0 = off
  float top_p = 1.0f;  // 1 = off
  float min_p = 0.0f;  // 0 = off
  float repetition_penalty = 1.0f;  // 1 = off
  // OpenAI's: minus presence_penalty for a token generated at least once, minus
  // frequency_penalty times its count, over the generated tokens only (0 = off).
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
};

// HF RepetitionPenaltyLogitsProcessor: for each distinct token in context, score < 0 → ×p,
// else ÷p.
void apply_repetition_penalty(std::vector<float>& scores, const std::vector<int32_t>& context,
                              float penalty);
// OpenAI's presence and frequency penalties over `generated` (the tokens sampled so far).
void apply_presence_frequency(std::vector<float>& scores, const int32_t* generated, size_t n,
                              float presence, float frequency);
void apply_temperature(std::vector<float>& scores, float temperature);
// Keeps the k highest scores (and ties with the k-th), as TopKLogitsWarper.
void apply_top_k(std::vector<float>& scores, int k);
// TopPLogitsWarper: removes the low tail whose cumulative probability is <= 1 - p (at least
// one token kept).
void apply_top_p(std::vector<float>& scores, float p);
// MinPLogitsWarper: removes tokens with probability < min_p × the top probability.
void apply_min_p(std::vector<float>& scores, float min_p);
std::vector<double> softmax(const std::vector<float>& scores);

// Applies the processors of params (all of them; temperature 0 skips the warpers) to logits.
// context[prompt_len ..] are the generated tokens (presence/frequency penalties). allowed, when
// given, masks every token i with allowed[i] == 0 first (constrained decoding: at least one
// token must be allowed).
std::vector<float> process_logits(const std::vector<float>& logits, const SamplingParams& params,
                                  const std::vector<int32_t>& context, size_t prompt_len = 0,
                                  const std::vector<uint8_t>* allowed = nullptr);
// Picks the next token: argmax for temperature 0, else a draw from softmax(processed). Throws
// NumericError when a logit is NaN or inf.
int32_t sample_token(const std::vector<float>& logits, const SamplingParams& params,
                     const std::vector<int32_t>& context, Rng& rng, size_t prompt_len = 0,
                     const std::vector<uint8_t>* allowed = nullptr);

}  // namespace unillm::infer
