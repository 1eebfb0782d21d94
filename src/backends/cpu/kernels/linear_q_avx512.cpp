// linear_q's code dots at the avx512 level (linear_q_simd.h): 16 codes per step widened to f32
// in registers (the all-ones maskz forms keep GCC 12's -Wmaybe-uninitialized quiet, as in
// vec_avx512.h), two accumulators; the tails go through the portable dots.
#include <immintrin.h>

#include "backends/cpu/kernels/linear_q_simd.h"
#include "backends/cpu/simd/vec_avx512.h"

namespace unillm::cpu::avx512 {
namespace {

inline __m512 codes_i8(const int8_t* q) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
  return _mm512_maskz_cvtepi32_ps(0xffff, _mm512_maskz_cvtepi8_epi32(0xffff, b));
}

// 32 codes from 16 bytes: low and high nibbles split, then interleaved back into code order.
struct Codes32 {
  __m512 lo, hi;  // codes 0..15 and 16..31 as f32
};
inline Codes32 codes_u4x32(const uint8_t* b) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b));
  const __m128i mask = _mm_set1_epi8(15);
  const __m128i lo = _mm_and_si128(v, mask), hi = _mm_and_si128(_mm_srli_epi16(v, 4), mask);
  const __m128i c0 = _mm_unpacklo_epi8(lo, hi), c1 = _mm_unpackhi_epi8(lo, hi);
  return {_mm512_maskz_cvtepi32_ps(0xffff, _mm512_maskz_cvtepu8_epi32(0xffff, c0)),
          _mm512_maskz_cvtepi32_ps(0xffff, _mm512_maskz_cvtepu8_epi32(0xffff, c1))};
}

float dot_i8(const float* x, const int8_t* q, int64_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), codes_i8(q + i), a0);
    a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16), codes_i8(q + i + 16), a1);
  }
  for (; i + 16 <= n; i += 16) a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), codes_i8(q + i), a0);
  return hsum16(_mm512_add_ps(a0, a1)) + portable::dot_i8(x + i, q + i, n - i);
}

float row_u4(const float* x, const uint8_t* row, const float* scales, int64_t k, int64_t group) {
  __m512 acc = _mm512_setzero_ps();
  float tail = 0;
  for (int64_t k0 = 0, g = 0; k0 < k; k0 += group, ++g) {
    const int64_t len = group < k - k0 ? group : k - k0;
    __m512 p0 = _mm512_setzero_ps(), p1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= len; i += 32) {
      const Codes32 c = codes_u4x32(row + (k0 + i) / 2);
      p0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + k0 + i), c.lo, p0);
      p1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + k0 + i + 16), c.hi, p1);
    }
    acc = _mm512_fmadd_ps(_mm512_set1_ps(scales[g]), _mm512_add_ps(p0, p1), acc);
    if (i < len) tail += scales[g] * portable::dot_u4(x + k0 + i, row, k0 + i, len - i);
  }
  return hsum16(acc) + tail;
}

}  // namespace

const QDots kQDots{&dot_i8, &row_u4};

}  // namespace unillm::cpu::avx512
