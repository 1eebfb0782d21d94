// CPU "cast" kernel: f32 <-> bf16/f16 over the row conversions of simd/convert.h (vectorised with
// F16C/AVX2 when the CPU has them), in parallel chunks.
#include "ops/cast.h"

#include "backends/cpu/kernels/register_kernels.h"
#include "backends/cpu/simd/convert.h"
#include "backends/cpu/simd/simd.h"
#include "core/parallel.h"
#include "core/registry.h"

namespace unillm::cpu {
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
    kernel_registry().add<ops::CastKernel>("cast", DeviceKind::cpu, t, &cast_kernel, "",
                                           avx2_or_portable());  // convert.h dispatches
}

}  // namespace unillm::cpu
