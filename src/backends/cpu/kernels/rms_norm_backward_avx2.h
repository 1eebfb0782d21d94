// Entry point of rms_norm_backward_avx2.cpp; rms_norm_backward.cpp's f32 kernel calls it only
// when cpu::has_avx2() is true (registration chooses that kernel at start-up).
#pragma once

#include <cstdint>

namespace unillm::cpu::avx2 {

// One row of rms_norm backward: dx = r·g∘w − x·r³/dim·Σ(g∘w∘x) (skipped when dx is nullptr) and
// dw_acc += g∘x·r (skipped when nullptr), r = 1/sqrt(mean(x²) + eps).
void rms_norm_backward_row(const float* g, const float* x, const float* w, float* dx, float* dw_acc,
                           int64_t dim, float eps);

}  // namespace unillm::cpu::avx2
