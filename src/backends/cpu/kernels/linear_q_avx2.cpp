// linear_q's code dots at the avx2 level (linear_q_simd.h): 8 codes per step widened to f32 in
// registers, two accumulators; the tails go through the portable dots.
#include <immintrin.h>

#include "backends/cpu/kernels/linear_q_simd.h"
#include "backends/cpu/simd/vec_avx2.h"

namespace unillm::cpu::avx2 {
namespace {

inline __m256 codes_i8(const int8_t* q) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q))));
}

// 32 codes from 16 bytes: low and high nibbles split, then interleaved back into code order.
struct Codes32 {
  __m256 c[4];  // codes 0..7, 8..15, 16..23, 24..31 as f32
};
inline Codes32 codes_u4x32(const uint8_t* b) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b));
  const __m128i mask = _mm_set1_epi8(15);
  const __m128i lo = _mm_and_si128(v, mask), hi = _mm_and_si128(_mm_srli_epi16(v, 4), mask);
  const __m128i c0 = _mm_unpacklo_epi8(lo, hi), c1 = _mm_unpackhi_epi8(lo, hi);
  return {{_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(c0)), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(c0, 8))),
           _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(c1)), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(c1, 8)))}};
}

float dot_i8(const float* x, const int8_t* q, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), codes_i8(q + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), codes_i8(q + i + 8), a1);
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), codes_i8(q + i), a0);
  return hsum(_mm256_add_ps(a0, a1)) + portable::dot_i8(x + i, q + i, n - i);
}

float row_u4(const float* x, const uint8_t* row, const float* scales, int64_t k, int64_t group) {
  __m256 acc = _mm256_setzero_ps();
  float tail = 0;
  for (int64_t k0 = 0, g = 0; k0 < k; k0 += group, ++g) {
    const int64_t len = group < k - k0 ? group : k - k0;
    __m256 p0 = _mm256_setzero_ps(), p1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= len; i += 32) {
      const Codes32 c = codes_u4x32(row + (k0 + i) / 2);
      const float* xi = x + k0 + i;
      p0 = _mm256_fmadd_ps(_mm256_loadu_ps(xi), c.c[0], p0);
      p1 = _mm256_fmadd_ps(_mm256_loadu_ps(xi + 8), c.c[1], p1);
      p0 = _mm256_fmadd_ps(_mm256_loadu_ps(xi + 16), c.c[2], p0);
      p1 = _mm256_fmadd_ps(_mm256_loadu_ps(xi + 24), c.c[3], p1);
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(scales[g]), _mm256_add_ps(p0, p1), acc);
    if (i < len) tail += scales[g] * portable::dot_u4(x + k0 + i, row, k0 + i, len - i);
  }
  return hsum(acc) + tail;
}

}  // namespace

const QDots kQDots{&dot_i8, &row_u4};

}  // namespace unillm::cpu::avx2
