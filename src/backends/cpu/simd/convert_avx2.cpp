// AVX2/F16C conversion of bf16/f16 rows to and from f32 (declared in convert_avx2.h).
#include "backends/cpu/simd/convert_avx2.h"

#include <cstring>

#include "backends/cpu/simd/vec_avx2.h"

namespace unillm::cpu::avx2 {

void to_f32(const void* src, DType t, float* dst, int64_t n) {
  const auto* p = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  if (t == DType::bf16) {
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, load_bf16x8(p + i));
    for (; i < n; ++i) dst[i] = bf16_to_f32(p[i]);
  } else if (t == DType::f16) {
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, load_f16x8(p + i));
    for (; i < n; ++i) dst[i] = _cvtsh_ss(p[i]);
  } else {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
  }
}

// bf16 round to nearest even on 8 lanes: u + 0x7fff + ((u >> 16) & 1), then the high halves;
// NaNs are kept quiet NaNs (as f32_to_bf16).
static inline __m128i bf16x8_from(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  const __m256i qnan = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  r = _mm256_blendv_epi8(r, qnan, nan);
  // Pack the 8 32-bit lanes (each < 65536) to 16 bits without saturation trouble.
  const __m128i lo = _mm256_castsi256_si128(r), hi = _mm256_extracti128_si256(r, 1);
  return _mm_packus_epi32(lo, hi);
}

void from_f32(const float* src, DType t, void* dst, int64_t n) {
  auto* p = static_cast<uint16_t*>(dst);
  int64_t i = 0;
  if (t == DType::bf16) {
    for (; i + 8 <= n; i += 8)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(p + i), bf16x8_from(_mm256_loadu_ps(src + i)));
    for (; i < n; ++i) p[i] = f32_to_bf16(src[i]);
  } else {
    for (; i + 8 <= n; i += 8)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(p + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; ++i) p[i] = _cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT);
  }
}

}  // namespace unillm::cpu::avx2
