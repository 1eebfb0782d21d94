// CPU softmax backward kernels: dx = y ∘ (dy − Σ y·dy) per row (the dot in double), portable
// templates for f32/f64, parallel over rows.
#include <algorithm>

#include "backends/cpu/kernels/register_kernels.h"
#include "backends/cpu/simd/simd.h"
#include "core/parallel.h"
#include "core/registry.h"
#include "ops/softmax.h"

namespace unillm::cpu {
namespace {

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

void register_softmax_backward() {
  auto& reg = kernel_registry();
  reg.add<ops::SoftmaxBackwardKernel>("softmax_backward", DeviceKind::cpu, DType::f32,
                                      &softmax_backward_portable<float>, "", kPortable);
  reg.add<ops::SoftmaxBackwardKernel>("softmax_backward", DeviceKind::cpu, DType::f64,
                                      &softmax_backward_portable<double>, "", kPortable);
}

}  // namespace unillm::cpu
