// Entry point of linear_avx512.cpp, called by linear.cpp's f32/bf16/f16 kernels only when the
// chosen ISA level is avx512 or above (registration chooses them at start-up).
#pragma once

#include "ops/linear.h"

namespace unillm::cpu::avx512 {

// y[m, n] for m <= 4 rows of f32 x and an f32/bf16/f16 W, reading W once (decode GEMV).
void gemv(const ops::LinearArgs& a);

}  // namespace unillm::cpu::avx512
