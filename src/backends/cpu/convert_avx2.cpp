// AVX2/F16C conversion of bf16/f16 rows to f32.
#include <cstring>

#include "backends/cpu/avx2_kernels.h"
#include "backends/cpu/vec_avx2.h"

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

}  // namespace unillm::cpu::avx2
