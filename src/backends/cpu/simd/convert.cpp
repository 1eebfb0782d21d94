// Portable row conversions between f32 and bf16/f16, forwarding to the AVX2/F16C versions
// (convert_avx2.cpp) when the CPU has them. The "cast" kernel over them is kernels/cast.cpp.
#include "backends/cpu/simd/convert.h"

#include <cstring>

#include "backends/cpu/simd/convert_avx2.h"
#include "backends/cpu/simd/convert_avx512_bf16.h"
#include "backends/cpu/simd/simd.h"

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

void from_f32(const float* src, DType t, void* dst, int64_t n) {
  if (t == DType::bf16 && isa_at_least(IsaLevel::avx512_bf16)) {
    avx512_bf16::f32_to_bf16(src, static_cast<uint16_t*>(dst), n);
    return;
  }
  if (has_avx2()) {
    avx2::from_f32(src, t, dst, n);
    return;
  }
  auto* p = static_cast<uint16_t*>(dst);
  if (t == DType::bf16) {
    for (int64_t i = 0; i < n; ++i) p[i] = f32_to_bf16(src[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) p[i] = f32_to_f16(src[i]);
  }
}

}  // namespace unillm::cpu
