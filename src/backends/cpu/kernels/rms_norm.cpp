// CPU rms_norm kernels: the AVX2 f32 kernel (any weight dtype) and portable templates for f32/f64,
// parallel over rows (the AVX2 one is rms_norm_avx2.cpp). Kernel key = the weight's dtype.
#include <cmath>
#include <vector>

#include "backends/cpu/kernels/register_kernels.h"
#include "backends/cpu/kernels/rms_norm_avx2.h"
#include "backends/cpu/simd/convert.h"
#include "backends/cpu/simd/simd.h"
#include "core/parallel.h"
#include "core/registry.h"
#include "ops/add_rms_norm.h"
#include "ops/rms_norm.h"

namespace unillm::cpu {
namespace {

using ops::RmsNormArgs;

template <typename T>
void rms_norm_portable(const RmsNormArgs& a) {
  std::vector<T> w(static_cast<size_t>(a.dim));
  if constexpr (sizeof(T) == 8) {
    const auto* wp = static_cast<const double*>(a.w);
    w.assign(wp, wp + a.dim);
  } else {
    to_f32(a.w, a.w_dtype, w.data(), a.dim);
  }
  const auto* x = static_cast<const T*>(a.x);
  auto* y = static_cast<T*>(a.y);
  parallel_for(a.rows, std::max<int64_t>(1, 8192 / a.dim), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const T* xr = x + r * a.dim;
      T* yr = y + r * a.dim;
      double ss = 0;
      for (int64_t c = 0; c < a.dim; ++c) ss += static_cast<double>(xr[c]) * xr[c];
      T inv = static_cast<T>(1.0 / std::sqrt(static_cast<T>(ss / a.dim) + static_cast<T>(a.eps)));
      for (int64_t c = 0; c < a.dim; ++c) yr[c] = xr[c] * inv * w[c];
    }
  });
}

// The residual add, then rms_norm_portable<float>'s arithmetic on the sum.
void add_rms_norm_portable(const ops::AddRmsNormArgs& a) {
  std::vector<float> w(static_cast<size_t>(a.dim));
  to_f32(a.w, a.w_dtype, w.data(), a.dim);
  parallel_for(a.rows, std::max<int64_t>(1, 8192 / a.dim), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t base = r * a.dim;
      float* sr = a.sum + base;
      float* yr = a.y + base;
      double ss = 0;
      for (int64_t c = 0; c < a.dim; ++c) {
        sr[c] = a.x[base + c] + a.delta[base + c];
        ss += static_cast<double>(sr[c]) * sr[c];
      }
      const float inv = static_cast<float>(1.0 / std::sqrt(static_cast<float>(ss / a.dim) + a.eps));
      for (int64_t c = 0; c < a.dim; ++c) yr[c] = sr[c] * inv * w[c];
    }
  });
}

}  // namespace

void register_rms_norm() {
  auto& reg = kernel_registry();
  auto* f32 = has_avx2() ? &avx2::rms_norm_f32 : &rms_norm_portable<float>;
  for (DType w : {DType::f32, DType::bf16, DType::f16})
    reg.add<ops::RmsNormKernel>("rms_norm", DeviceKind::cpu, w, f32, "", avx2_or_portable());
  reg.add<ops::RmsNormKernel>("rms_norm", DeviceKind::cpu, DType::f64, &rms_norm_portable<double>,
                              "", kPortable);
  auto* fused = has_avx2() ? &avx2::add_rms_norm_f32 : &add_rms_norm_portable;
  for (DType w : {DType::f32, DType::bf16, DType::f16})
    reg.add<ops::AddRmsNormKernel>("add_rms_norm", DeviceKind::cpu, w, fused, "", avx2_or_portable());
}

}  // namespace unillm::cpu
