// CPU swiglu backward kernels: the AVX2 f32 version (swiglu_backward_avx2.cpp) and portable
// templates for f32/f64, parallel over rows.
#include <algorithm>
#include <cmath>

#include "backends/cpu/kernels/register_kernels.h"
#include "backends/cpu/kernels/swiglu_backward_avx2.h"
#include "backends/cpu/simd/simd.h"
#include "core/parallel.h"
#include "core/registry.h"
#include "ops/swiglu.h"

namespace unillm::cpu {
namespace {

template <typename T>
void swiglu_backward_portable(const ops::SwigluBackwardArgs& a) {
  const auto* gu = static_cast<const T*>(a.gate_up);
  const auto* dy = static_cast<const T*>(a.dout);
  auto* dgu = static_cast<T*>(a.dgate_up);
  const int64_t f = a.ffn;
  parallel_for(a.rows, std::max<int64_t>(1, 8192 / f), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const T* g = gu + r * 2 * f;
      const T* u = g + f;
      T* dg = dgu + r * 2 * f;
      T* du = dg + f;
      for (int64_t i = 0; i < f; ++i) {
        T s = T(1) / (T(1) + std::exp(-g[i])), d = dy[r * f + i];
        dg[i] = d * u[i] * (s * (T(1) + g[i] * (T(1) - s)));
        du[i] = d * (g[i] * s);
      }
    }
  });
}

}  // namespace

void register_swiglu_backward() {
  auto& reg = kernel_registry();
  reg.add<ops::SwigluBackwardKernel>(
      "swiglu_backward", DeviceKind::cpu, DType::f32,
      has_avx2() ? &avx2::swiglu_backward_f32 : &swiglu_backward_portable<float>, "",
      avx2_or_portable());
  reg.add<ops::SwigluBackwardKernel>("swiglu_backward", DeviceKind::cpu, DType::f64,
                                     &swiglu_backward_portable<double>, "", kPortable);
}

}  // namespace unillm::cpu
