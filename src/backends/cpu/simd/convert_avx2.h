// Entry points of convert_avx2.cpp: the AVX2/F16C row conversions behind convert.h's to_f32 and
// from_f32 (which call them when cpu::has_avx2()); *_avx2.cpp kernels call them directly.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace unillm::cpu::avx2 {

void to_f32(const void* src, DType t, float* dst, int64_t n);
void from_f32(const float* src, DType t, void* dst, int64_t n);

}  // namespace unillm::cpu::avx2
