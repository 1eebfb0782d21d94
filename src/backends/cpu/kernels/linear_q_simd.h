// The ISA-specific part of linear_q's decode GEMV (linear_q.cpp): dots of f32 activations with
// int8 codes and with packed 4-bit codes. One table per level; the avx2/avx512 tables live in
// linear_q_avx2.cpp / linear_q_avx512.cpp (compiled for their level, chosen at start-up).
#pragma once

#include <cstdint>

namespace unillm::cpu {

struct QDots {
  // Σ x[i] · q[i] for i < n.
  float (*dot_i8)(const float* x, const int8_t* q, int64_t n);
  // Σ x[i] · code(k0 + i) for i < n, the 4-bit codes of row (even k in the low nibble); the
  // SIMD versions need an even k0.
  float (*dot_u4)(const float* x, const uint8_t* row, int64_t k0, int64_t n);
};

namespace portable {
float dot_i8(const float* x, const int8_t* q, int64_t n);
float dot_u4(const float* x, const uint8_t* row, int64_t k0, int64_t n);
}  // namespace portable

namespace avx2 {
extern const QDots kQDots;
}
namespace avx512 {
extern const QDots kQDots;
}

}  // namespace unillm::cpu
