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

// 16 codes from 8 bytes: each byte twice (low nibble, then high), shifted into place.
inline __m512 codes_u4(const uint8_t* b) {
  int64_t eight;
  __builtin_memcpy(&eight, b, 8);
  const __m128i dup = _mm_shuffle_epi8(_mm_cvtsi64_si128(eight), _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7));
  const __m512i wide = _mm512_maskz_cvtepu8_epi32(0xffff, dup);
  const __m512i shift = _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4);
  const __m512i codes = _mm512_maskz_and_epi32(0xffff, _mm512_maskz_srlv_epi32(0xffff, wide, shift), _mm512_set1_epi32(15));
  return _mm512_maskz_cvtepi32_ps(0xffff, codes);
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

float dot_u4(const float* x, const uint8_t* row, int64_t k0, int64_t n) {
  const uint8_t* b = row + k0 / 2;
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), codes_u4(b + i / 2), a0);
    a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16), codes_u4(b + i / 2 + 8), a1);
  }
  for (; i + 16 <= n; i += 16) a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), codes_u4(b + i / 2), a0);
  return hsum16(_mm512_add_ps(a0, a1)) + portable::dot_u4(x + i, row, k0 + i, n - i);
}

}  // namespace

const QDots kQDots{&dot_i8, &dot_u4};

}  // namespace unillm::cpu::avx512
