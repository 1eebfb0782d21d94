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

// Rows of a bf16/f16 weight [rows, k] that GEMM kernels convert to f32 at a time: about 8 MiB of
// f32, at least 256 rows, a multiple of 64. Larger panels mean fewer, larger sgemm calls; with
// 1 MiB panels the 32000-row lm_head of a bf16 LoRA run went through 34 sgemm calls per logits
// chunk and the step ran at 0.83x f32's speed, with 8 MiB at 0.93-0.96x (stories15M).
inline int64_t half_panel_rows(int64_t rows, int64_t k) {
  constexpr int64_t kPanelFloats = int64_t{1} << 21;
  const int64_t by_size = (kPanelFloats / (k > 0 ? k : 1) + 63) / 64 * 64;
  const int64_t panel = by_size > 256 ? by_size : 256;
  return panel < rows ? panel : rows;
}

}  // namespace unillm::cpu
