// Compiled with AVX-512 F/BW/VL/DQ + BF16 (CMakeLists.txt); called only at the avx512_bf16 level
// and above (convert.cpp).
#include "backends/cpu/simd/convert_avx512_bf16.h"

#include <immintrin.h>

namespace unillm::cpu::avx512_bf16 {

void f32_to_bf16(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + i + 16), _mm512_loadu_ps(src + i));
    _mm512_storeu_si512(dst + i, reinterpret_cast<const __m512i&>(v));
  }
  if (i < n) {  // the tail through masks: one to 31 elements
    const int64_t left = n - i;
    const __mmask16 lo = static_cast<__mmask16>(left >= 16 ? 0xffff : (1u << left) - 1);
    const __mmask16 hi = static_cast<__mmask16>(left <= 16 ? 0 : (1u << (left - 16)) - 1);
    const __m512 a = _mm512_maskz_loadu_ps(lo, src + i);
    const __m512 b = _mm512_maskz_loadu_ps(hi, src + i + 16);
    const __m512bh v = _mm512_cvtne2ps_pbh(b, a);
    const __mmask32 m = static_cast<__mmask32>(lo) | (static_cast<__mmask32>(hi) << 16);
    _mm512_mask_storeu_epi16(dst + i, m, reinterpret_cast<const __m512i&>(v));
  }
}

}  // namespace unillm::cpu::avx512_bf16
