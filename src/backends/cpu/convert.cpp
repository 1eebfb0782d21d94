// Portable row conversion to f32, forwarding to the AVX2/F16C version when available.
#include "backends/cpu/convert.h"

#include <cstring>

#include "backends/cpu/avx2_kernels.h"
#include "backends/cpu/kernel_list.h"
#include "backends/cpu/simd.h"
#include "core/parallel.h"
#include "core/registry.h"
#include "ops/cast.h"

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

namespace {

// The "cast" kernel: f32 <-> bf16/f16 in parallel chunks of 16 Ki elements.
void cast_kernel(const ops::CastArgs& a) {
  parallel_for(a.n, 1 << 14, [&](int64_t b, int64_t e) {
    if (a.src_dtype == DType::f32)
      from_f32(static_cast<const float*>(a.src) + b, a.dst_dtype, static_cast<uint16_t*>(a.dst) + b, e - b);
    else
      to_f32(static_cast<const uint16_t*>(a.src) + b, a.src_dtype, static_cast<float*>(a.dst) + b, e - b);
  });
}

}  // namespace

void register_cast() {
  for (DType t : {DType::bf16, DType::f16})
    kernel_registry().add<ops::CastKernel>("cast", DeviceKind::cpu, t, &cast_kernel);
}

}  // namespace unillm::cpu
