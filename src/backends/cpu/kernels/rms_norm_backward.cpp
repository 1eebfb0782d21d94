// CPU rms_norm backward: rows split into fixed parts (one per thread); each part writes its rows'
// dx and accumulates a private dw partial, and the partials are summed in part order (parallel over
// columns), so dw is deterministic for a thread count. The f32 row is the AVX2 one
// (rms_norm_backward_avx2.cpp) when available.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/gemm/gemm_backward.h"
#include "backends/cpu/kernels/register_kernels.h"
#include "backends/cpu/kernels/rms_norm_backward_avx2.h"
#include "backends/cpu/simd/convert.h"
#include "backends/cpu/simd/simd.h"
#include "core/registry.h"
#include "ops/rms_norm.h"

namespace unillm::cpu {
namespace {

template <typename T>
void backward_row(const T* g, const T* x, const T* w, T* dx, T* dw_acc, int64_t dim, float eps) {
  double ss = 0, dot = 0;
  for (int64_t c = 0; c < dim; ++c) {
    ss += static_cast<double>(x[c]) * x[c];
    dot += static_cast<double>(g[c]) * w[c] * x[c];
  }
  const T inv = static_cast<T>(1.0 / std::sqrt(ss / static_cast<double>(dim) + eps));
  const T k = static_cast<T>(dot) * inv * inv * inv / static_cast<T>(dim);
  for (int64_t c = 0; c < dim; ++c) {
    if (dx) dx[c] = inv * (g[c] * w[c]) - x[c] * k;
    if (dw_acc) dw_acc[c] += g[c] * x[c] * inv;
  }
}

template <typename T, bool kAvx2>
void rms_norm_backward(const ops::RmsNormBackwardArgs& a) {
  std::vector<T> w(static_cast<size_t>(a.dim));
  if constexpr (sizeof(T) == 4) {
    to_f32(a.w, a.w_dtype, w.data(), a.dim);
  } else {
    std::copy_n(static_cast<const T*>(a.w), a.dim, w.data());
  }
  const auto* g = static_cast<const T*>(a.dy);
  const auto* x = static_cast<const T*>(a.x);
  auto* dx = static_cast<T*>(a.dx);
  const int64_t parts = parts_for(a.rows, std::max<int64_t>(1, 16384 / a.dim));
  std::vector<T> partial(a.dw ? static_cast<size_t>(parts * a.dim) : 0, T(0));
  for_parts(a.rows, parts, [&](int64_t p, int64_t lo, int64_t hi) {
    T* acc = a.dw ? partial.data() + p * a.dim : nullptr;
    for (int64_t r = lo; r < hi; ++r) {
      T* dxr = dx ? dx + r * a.dim : nullptr;
      if constexpr (kAvx2)
        avx2::rms_norm_backward_row(g + r * a.dim, x + r * a.dim, w.data(), dxr, acc, a.dim, a.eps);
      else
        backward_row<T>(g + r * a.dim, x + r * a.dim, w.data(), dxr, acc, a.dim, a.eps);
    }
  });
  if (!a.dw) return;
  auto* dw = static_cast<T*>(a.dw);
  parallel_for(a.dim, 1024, [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) {
      T s = 0;
      for (int64_t p = 0; p < parts; ++p) s += partial[p * a.dim + c];
      dw[c] = s;
    }
  });
}

}  // namespace

void register_rms_norm_backward() {
  auto& reg = kernel_registry();
  auto* f32 = has_avx2() ? &rms_norm_backward<float, true> : &rms_norm_backward<float, false>;
  for (DType w : {DType::f32, DType::bf16, DType::f16})
    reg.add<ops::RmsNormBackwardKernel>("rms_norm_backward", DeviceKind::cpu, w, f32, "",
                                        avx2_or_portable());
  reg.add<ops::RmsNormBackwardKernel>("rms_norm_backward", DeviceKind::cpu, DType::f64,
                                      &rms_norm_backward<double, false>, "", kPortable);
}

}  // namespace unillm::cpu
