// CPU swiglu kernels: the AVX2 f32 version (swiglu_avx2.cpp) and portable templates for f32/f64,
// parallel over rows.
#include <algorithm>
#include <cmath>

#include "backends/cpu/kernels/register_kernels.h"
#include "backends/cpu/kernels/swiglu_avx2.h"
#include "backends/cpu/simd/simd.h"
#include "core/parallel.h"
#include "core/registry.h"
#include "ops/swiglu.h"

namespace unillm::cpu {
namespace {

template <typename T>
void swiglu_portable(const ops::SwigluArgs& a) {
  const auto* gu = static_cast<const T*>(a.gate_up);
  auto* out = static_cast<T*>(a.out);
  parallel_for(a.rows, std::max<int64_t>(1, 16384 / a.ffn), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const T* g = gu + r * 2 * a.ffn;
      const T* u = g + a.ffn;
      for (int64_t i = 0; i < a.ffn; ++i) out[r * a.ffn + i] = g[i] / (T(1) + std::exp(-g[i])) * u[i];
    }
  });
}

}  // namespace

void register_swiglu() {
  auto& reg = kernel_registry();
  reg.add<ops::SwigluKernel>("swiglu", DeviceKind::cpu, DType::f32,
                             has_avx2() ? &avx2::swiglu_f32 : &swiglu_portable<float>, "",
                             avx2_or_portable());
  reg.add<ops::SwigluKernel>("swiglu", DeviceKind::cpu, DType::f64, &swiglu_portable<double>, "",
                             kPortable);
}

}  // namespace unillm::cpu
