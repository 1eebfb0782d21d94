// Entry points of the backward *_avx2.cpp files (and the fused cross-entropy's row functions).
// Call them only when cpu::has_avx2() is true (registration chooses them at start-up).
#pragma once

#include <cstdint>

#include "ops/swiglu.h"

namespace unillm::cpu::avx2 {

// One row of rms_norm backward: dx = r·g∘w − x·r³/dim·Σ(g∘w∘x) (skipped when dx is nullptr) and
// dw_acc += g∘x·r (skipped when nullptr), r = 1/sqrt(mean(x²) + eps).
void rms_norm_backward_row(const float* g, const float* x, const float* w, float* dx,
                           float* dw_acc, int64_t dim, float eps);
void swiglu_backward_f32(const ops::SwigluBackwardArgs& a);
// log Σ exp(l[i]) with the max subtracted.
float row_logsumexp(const float* l, int64_t n);
// l[i] = exp(l[i] − lse) · scale, in place.
void row_softmax_scaled(float* l, int64_t n, float lse, float scale);

}  // namespace unillm::cpu::avx2
