// Row conversions of low-precision weights to f32 for the kernels (vectorised with F16C/AVX2 when
// the CPU has them).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace unillm::cpu {

// dst[i] = float(src[i]) for i < n; src is f32, bf16 or f16.
void to_f32(const void* src, DType t, float* dst, int64_t n);
// dst[i] = src[i] rounded to nearest even in t (bf16 or f16) for i < n.
void from_f32(const float* src, DType t, void* dst, int64_t n);

}  // namespace unillm::cpu
