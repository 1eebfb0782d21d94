// AVX-512 F/BW/VL/DQ helpers for the *_avx512.cpp kernels only (they are compiled with those
// flags). Everything is `static inline` in namespace avx512, so no symbol leaks into portable or
// AVX2 files (scripts/check_isa.sh looks for zmm outside "avx512" functions).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace unillm::cpu::avx512 {

// Mask with the first n (0..16) lanes set, for tails.
static inline __mmask16 tail_mask16(int64_t n) {
  return static_cast<__mmask16>(n >= 16 ? 0xffff : (1u << n) - 1);
}

// bf16 → f32 by widening to 32 bits and shifting. The all-ones maskz forms (here and below)
// compile to the same instructions; the unmasked intrinsics trip GCC 12's -Wmaybe-uninitialized (their
// _mm512_undefined_epi32 placeholder).
static inline __m512 bf16x16_to_f32(__m256i v) {
  const __m512i w = _mm512_maskz_cvtepu16_epi32(0xffff, v);
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, w, 16));
}

static inline __m512 load_bf16x16(const uint16_t* p) {
  return bf16x16_to_f32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

static inline __m512 load_bf16x16(const uint16_t* p, __mmask16 m) {
  return bf16x16_to_f32(_mm256_maskz_loadu_epi16(m, p));
}

static inline __m512 load_f16x16(const uint16_t* p) {
  return _mm512_maskz_cvtph_ps(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

static inline __m512 load_f16x16(const uint16_t* p, __mmask16 m) {
  return _mm512_maskz_cvtph_ps(0xffff, _mm256_maskz_loadu_epi16(m, p));
}

// Sum of the 16 lanes (halves added pairwise). Not _mm512_reduce_add_ps or the casts: GCC 12 warns
// on their _mm256_undefined_pd placeholder.
static inline float hsum16(__m512 v) {
  const __m256 h = _mm256_add_ps(_mm512_maskz_extractf32x8_ps(0xff, v, 0),
                                 _mm512_maskz_extractf32x8_ps(0xff, v, 1));
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Largest of the 16 lanes, the same way.
static inline float hmax16(__m512 v) {
  const __m256 h = _mm256_max_ps(_mm512_maskz_extractf32x8_ps(0xff, v, 0),
                                 _mm512_maskz_extractf32x8_ps(0xff, v, 1));
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace unillm::cpu::avx512
