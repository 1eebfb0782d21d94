// Entry points of linear_cross_entropy_avx2.cpp: the fused cross-entropy's row functions for f32
// logits. linear_cross_entropy.cpp calls them only from the kernels it registers when
// cpu::has_avx2() is true.
#pragma once

#include <cstdint>

namespace unillm::cpu::avx2 {

// log Σ exp(l[i]) with the max subtracted.
float row_logsumexp(const float* l, int64_t n);
// l[i] = exp(l[i] − lse) · scale, in place.
void row_softmax_scaled(float* l, int64_t n, float lse, float scale);

}  // namespace unillm::cpu::avx2
