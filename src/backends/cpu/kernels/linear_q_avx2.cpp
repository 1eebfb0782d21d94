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

// 8 codes from 4 bytes: each byte twice (low nibble, then high), shifted into place.
inline __m256 codes_u4(const uint8_t* b) {
  int32_t four;
  __builtin_memcpy(&four, b, 4);
  const __m128i dup = _mm_shuffle_epi8(_mm_cvtsi32_si128(four), _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, -1, -1, -1, -1, -1, -1, -1, -1));
  const __m256i wide = _mm256_cvtepu8_epi32(dup);
  const __m256i shifted = _mm256_srlv_epi32(wide, _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4));
  return _mm256_cvtepi32_ps(_mm256_and_si256(shifted, _mm256_set1_epi32(15)));
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

float dot_u4(const float* x, const uint8_t* row, int64_t k0, int64_t n) {
  const uint8_t* b = row + k0 / 2;
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), codes_u4(b + i / 2), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), codes_u4(b + i / 2 + 4), a1);
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), codes_u4(b + i / 2), a0);
  return hsum(_mm256_add_ps(a0, a1)) + portable::dot_u4(x + i, row, k0 + i, n - i);
}

}  // namespace

const QDots kQDots{&dot_i8, &dot_u4};

}  // namespace unillm::cpu::avx2
