// Perplexity with HF's sliding-window rule (the "Perplexity of fixed-length models" guide):
// windows of max_length tokens advanced by stride; each window scores only the tokens not scored
// by the previous one (the first window scores every token after the first).
#pragma once

#include <cstdint>
#include <vector>

#include "models/causal_lm.h"

namespace unillm::infer {

struct PerplexityResult {
  double nll = 0;  // mean negative log-likelihood over scored tokens
  int64_t tokens = 0;  // scored tokens (every token after the first)
  double ppl = 0;  // exp(nll)
};

PerplexityResult perplexity(models::CausalLM& model, const std::vector<int32_t>& ids,
                            int64_t max_length, int64_t stride);

}  // namespace unillm::infer
