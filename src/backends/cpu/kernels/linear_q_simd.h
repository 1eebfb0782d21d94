// The ISA-specific part of linear_q's decode GEMV (linear_q.cpp): dots of f32 activations with
// int8 codes and with packed 4-bit codes. One table per level; the avx2/avx512 tables live in
// linear_q_avx2.cpp / linear_q_avx512.cpp (compiled for their level, chosen at start-up).
#pragma once

#include <cstdint>

#include "backends/cpu/simd/convert.h"
#include "ops/quant.h"

namespace unillm::cpu {

// Output row j's G scales (or mins) of a [N, G] buffer as f32: a pointer into it for f32 scales,
// else widened from f16 into buf (G floats). Converting one row's G values before its dot keeps
// the inner loops on f32 scales; the bytes read from memory are the f16 ones.
inline const float* row_scales(const void* base, DType dtype, int64_t j, int64_t G, float* buf) {
  if (dtype == DType::f32) return static_cast<const float*>(base) + j * G;
  to_f32(static_cast<const uint16_t*>(base) + j * G, dtype, buf, G);
  return buf;
}

struct QDots {
  // Σ x[i] · q[i] for i < n.
  float (*dot_i8)(const float* x, const int8_t* q, int64_t n);
  // One row of packed 4-bit codes (even k in the low nibble): Σ_g scales[g] · Σ_{k in group g}
  // x[k] · code(k), over groups of `group` (the last one shorter when group does not divide k).
  // The SIMD versions need group % 32 == 0 (linear_q.cpp falls back to the portable one).
  float (*row_u4)(const float* x, const uint8_t* row, const float* scales, int64_t k, int64_t group);
};

namespace portable {
float dot_i8(const float* x, const int8_t* q, int64_t n);
// Σ x[i] · code(k0 + i) for i < n (any k0).
float dot_u4(const float* x, const uint8_t* row, int64_t k0, int64_t n);
float row_u4(const float* x, const uint8_t* row, const float* scales, int64_t k, int64_t group);
}  // namespace portable

namespace avx2 {
extern const QDots kQDots;
}
namespace avx512 {
extern const QDots kQDots;
}
namespace avx512_bf16 {
// The int4 GEMV with int8 activations (VNNI), when args allow it (int8_activations, int4 codes,
// group % 32 == 0, K % 64 == 0); false (nothing written) otherwise.
bool linear_q_u4_vnni(const ops::QLinearArgs& a);
// The int8 and int4 GEMM with int8 activations (linear_q_gemm_avx512_bf16.cpp), when args allow
// it (int8_activations, K % 32 == 0, int4 groups of whole 32-blocks); false otherwise.
bool linear_q_gemm_vnni(const ops::QLinearArgs& a);
}  // namespace avx512_bf16

}  // namespace unillm::cpu
