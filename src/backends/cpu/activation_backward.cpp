// CPU swiglu and softmax backward kernels: AVX2 f32 swiglu (activation_backward_avx2.cpp) and
// portable templates for f32/f64, parallel over rows.
#include <algorithm>
#include <cmath>

#include "backends/cpu/avx2_backward_kernels.h"
#include "backends/cpu/backward_kernel_list.h"
#include "backends/cpu/simd.h"
#include "core/parallel.h"
#include "core/registry.h"
#include "ops/softmax.h"

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

template <typename T>
void softmax_backward_portable(const ops::SoftmaxBackwardArgs& a) {
  const auto* y = static_cast<const T*>(a.y);
  const auto* dy = static_cast<const T*>(a.dy);
  auto* dx = static_cast<T*>(a.dx);
  parallel_for(a.rows, std::max<int64_t>(1, 16384 / a.cols), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const T *yr = y + r * a.cols, *gr = dy + r * a.cols;
      T* xr = dx + r * a.cols;
      double dot = 0;
      for (int64_t c = 0; c < a.cols; ++c) dot += static_cast<double>(yr[c]) * gr[c];
      const T d = static_cast<T>(dot);
      for (int64_t c = 0; c < a.cols; ++c) xr[c] = yr[c] * (gr[c] - d);
    }
  });
}

}  // namespace

void register_activation_backward() {
  auto& reg = kernel_registry();
  reg.add<ops::SwigluBackwardKernel>(
      "swiglu_backward", DeviceKind::cpu, DType::f32,
      has_avx2() ? &avx2::swiglu_backward_f32 : &swiglu_backward_portable<float>);
  reg.add<ops::SwigluBackwardKernel>("swiglu_backward", DeviceKind::cpu, DType::f64,
                                     &swiglu_backward_portable<double>);
  reg.add<ops::SoftmaxBackwardKernel>("softmax_backward", DeviceKind::cpu, DType::f32,
                                      &softmax_backward_portable<float>);
  reg.add<ops::SoftmaxBackwardKernel>("softmax_backward", DeviceKind::cpu, DType::f64,
                                      &softmax_backward_portable<double>);
}

}  // namespace unillm::cpu
