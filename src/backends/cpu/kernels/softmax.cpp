// CPU softmax kernels (over the last dimension): the AVX2 f32 version (softmax_avx2.cpp) and
// portable templates for f32/f64, parallel over rows.
#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/cpu/kernels/register_kernels.h"
#include "backends/cpu/kernels/softmax_avx2.h"
#include "backends/cpu/simd/simd.h"
#include "core/parallel.h"
#include "core/registry.h"
#include "ops/softmax.h"

namespace unillm::cpu {
namespace {

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

void register_softmax() {
  auto& reg = kernel_registry();
  reg.add<ops::SoftmaxKernel>("softmax", DeviceKind::cpu, DType::f32,
                              has_avx2() ? &avx2::softmax_f32 : &softmax_portable<float>, "",
                              avx2_or_portable());
  reg.add<ops::SoftmaxKernel>("softmax", DeviceKind::cpu, DType::f64, &softmax_portable<double>, "",
                              kPortable);
}

}  // namespace unillm::cpu
