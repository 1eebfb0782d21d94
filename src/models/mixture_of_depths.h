// Mixture-of-depths as the mixture-of-depth package (PyPI `mixture-of-depth`, which LLaMA-Factory's
// `mixture_of_depths: convert|load` uses) computes it; docs/ARCHITECTURE.md, "Mixture of depths".
// Every odd decoder layer l becomes:
//   w = router(x) = x · r + b            (per token, f32)
//   each row keeps the tokens whose w is above its k-th largest (at or above it when k = 1),
//   k = max(1, ⌊capacity · T⌋) with T the batch's (padded) length;
//   those tokens run through layer l as a sequence of their own (their own positions, causal
//   among themselves) and come out as layer_l(x_sel) · w (the layer's output includes its
//   residual); the others pass through unchanged.
// The capacity follows a counter of training forwards (the package's training_step):
// calls ← calls + 1 (+ 999 from 1000 on, as the package writes it), capacity = 0.125 + 0.875 /
// calls; an evaluation forward keeps the capacity the last training forward set (0.125 before).
#pragma once

#include <cstdint>
#include <vector>

namespace unillm::models {

int64_t mod_next_calls(int64_t calls);
double mod_capacity(int64_t calls);  // 0.125 for calls = 0
// Tokens kept per row of length t.
int64_t mod_tokens(double capacity, int64_t t);
// The kept positions of one row's router weights w[0..t), ascending.
std::vector<int32_t> mod_select(const float* w, int64_t t, int64_t k);

}  // namespace unillm::models
