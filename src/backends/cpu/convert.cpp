// Portable row conversion to f32, forwarding to the AVX2/F16C version when available.
#include "backends/cpu/convert.h"

#include <cstring>

#include "backends/cpu/avx2_kernels.h"
#include "backends/cpu/simd.h"

namespace unillm::cpu {

void to_f32(const void* src, DType t, float* dst, int64_t n) {
  if (t == DType::f32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  if (has_avx2()) {
    avx2::to_f32(src, t, dst, n);
    return;
  }
  const auto* p = static_cast<const uint16_t*>(src);
  if (t == DType::bf16) {
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(p[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(p[i]);
  }
}

}  // namespace unillm::cpu
