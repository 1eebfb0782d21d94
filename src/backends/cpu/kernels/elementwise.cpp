// CPU add/mul kernels (the op family of ops/elementwise.h): AVX2 f32 (elementwise_avx2.cpp) and
// portable templates, parallel in chunks.
#include "backends/cpu/kernels/elementwise_avx2.h"
#include "backends/cpu/kernels/register_kernels.h"
#include "backends/cpu/simd/simd.h"
#include "core/parallel.h"
#include "core/registry.h"
#include "ops/elementwise.h"

namespace unillm::cpu {
namespace {

template <typename T, bool kMul>
void binary_portable(const ops::BinaryArgs& a) {
  const auto* x = static_cast<const T*>(a.a);
  const auto* y = static_cast<const T*>(a.b);
  auto* out = static_cast<T*>(a.out);
  parallel_for(a.n, 1 << 15, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) out[i] = kMul ? x[i] * y[i] : x[i] + y[i];
  });
}

}  // namespace

void register_elementwise() {
  auto& reg = kernel_registry();
  const bool v = has_avx2();
  reg.add<ops::BinaryKernel>("add", DeviceKind::cpu, DType::f32,
                             v ? &avx2::add_f32 : &binary_portable<float, false>, "",
                             avx2_or_portable());
  reg.add<ops::BinaryKernel>("mul", DeviceKind::cpu, DType::f32,
                             v ? &avx2::mul_f32 : &binary_portable<float, true>, "",
                             avx2_or_portable());
  reg.add<ops::BinaryKernel>("add", DeviceKind::cpu, DType::f64, &binary_portable<double, false>,
                             "", kPortable);
  reg.add<ops::BinaryKernel>("mul", DeviceKind::cpu, DType::f64, &binary_portable<double, true>, "",
                             kPortable);
}

}  // namespace unillm::cpu
