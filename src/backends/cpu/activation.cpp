// CPU swiglu and softmax kernels: AVX2 f32 versions (activation_avx2.cpp) and portable templates
// for f32/f64, parallel over rows.
#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/cpu/avx2_kernels.h"
#include "backends/cpu/kernel_list.h"
#include "backends/cpu/simd.h"
#include "core/parallel.h"
#include "core/registry.h"

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

template <typename T>
void softmax_portable(const ops::SoftmaxArgs& a) {
  const auto* x = static_cast<const T*>(a.x);
  auto* y = static_cast<T*>(a.y);
  parallel_for(a.rows, std::max<int64_t>(1, 16384 / a.cols), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const T* xr = x + r * a.cols;
      T* yr = y + r * a.cols;
      T mx = -std::numeric_limits<T>::infinity();
      for (int64_t c = 0; c < a.cols; ++c) mx = std::max(mx, xr[c]);
      T sum = 0;
      for (int64_t c = 0; c < a.cols; ++c) sum += (yr[c] = std::exp(xr[c] - mx));
      T inv = T(1) / sum;
      for (int64_t c = 0; c < a.cols; ++c) yr[c] *= inv;
    }
  });
}

}  // namespace

void register_activation() {
  auto& reg = kernel_registry();
  const bool v = has_avx2();
  reg.add<ops::SwigluKernel>("swiglu", DeviceKind::cpu, DType::f32,
                             v ? &avx2::swiglu_f32 : &swiglu_portable<float>);
  reg.add<ops::SwigluKernel>("swiglu", DeviceKind::cpu, DType::f64, &swiglu_portable<double>);
  reg.add<ops::SoftmaxKernel>("softmax", DeviceKind::cpu, DType::f32,
                              v ? &avx2::softmax_f32 : &softmax_portable<float>);
  reg.add<ops::SoftmaxKernel>("softmax", DeviceKind::cpu, DType::f64, &softmax_portable<double>);
}

}  // namespace unillm::cpu
