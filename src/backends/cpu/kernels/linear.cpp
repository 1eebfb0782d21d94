// CPU linear kernels: f32/f64 through the GEMM provider (gemm/provider.h; row-major x · Wᵀ), bf16/f16 weights converted to f32
// one panel of rows at a time (never the whole matrix), and the AVX2/AVX-512 GEMV for decode (M <= 4,
// linear_avx2.cpp, linear_avx512.cpp). Under bf16 compute (gemm/bf16_compute.h) the GEMM takes bf16 x and W.
#include <algorithm>
#include <vector>

#include "backends/cpu/gemm/bf16_compute.h"
#include "backends/cpu/gemm/provider.h"
#include "backends/cpu/kernels/linear_avx2.h"
#include "backends/cpu/kernels/linear_avx512.h"
#include "backends/cpu/kernels/register_kernels.h"
#include "backends/cpu/scratch.h"
#include "backends/cpu/simd/convert.h"
#include "backends/cpu/simd/simd.h"
#include "core/parallel.h"
#include "core/registry.h"
#include "ops/linear.h"

namespace unillm::cpu {
namespace {

using ops::LinearArgs;

constexpr int64_t kGemvMaxRows = 4;

// Fills y's rows with the bias (so GEMM can accumulate with beta = 1); returns beta.
template <typename T>
T init_bias(const LinearArgs& a) {
  if (!a.bias) return T(0);
  const auto* b = static_cast<const T*>(a.bias);
  auto* y = static_cast<T*>(a.y);
  parallel_for(a.m, 64, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) std::copy(b, b + a.n, y + i * a.n);
  });
  return T(1);
}

void linear_f64(const LinearArgs& a) {
  double beta = init_bias<double>(a);
  dgemm(false, true, a.m, a.n, a.k, 1.0, static_cast<const double*>(a.x), a.k,
        static_cast<const double*>(a.w), a.k, beta, static_cast<double*>(a.y), a.n);
}

void linear_f32_blas(const LinearArgs& a) {
  float beta = init_bias<float>(a);
  sgemm(false, true, a.m, a.n, a.k, 1.0f, static_cast<const float*>(a.x), a.k,
        static_cast<const float*>(a.w), a.k, beta, static_cast<float*>(a.y), a.n);
}

// bf16/f16 W: convert a panel of P rows (half_panel_rows: about 8 MiB of f32) in parallel, then
// one sgemm writes y[:, n0:n0+P].
void linear_half_panels(const LinearArgs& a) {
  float beta = init_bias<float>(a);
  const int64_t panel = half_panel_rows(a.n, a.k);
  Scratch<float> buf(panel * a.k);
  const size_t es = dtype_size(a.w_dtype);
  const auto* w = static_cast<const char*>(a.w);
  for (int64_t n0 = 0; n0 < a.n; n0 += panel) {
    const int64_t rows = std::min(panel, a.n - n0);
    parallel_for(rows, 16, [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r)
        to_f32(w + (n0 + r) * a.k * static_cast<int64_t>(es), a.w_dtype, buf.data() + r * a.k, a.k);
    });
    sgemm(false, true, a.m, rows, a.k, 1.0f, static_cast<const float*>(a.x), a.k, buf.data(), a.k,
          beta, static_cast<float*>(a.y) + n0, a.n);
  }
}

// x and (an f32) W rounded to bf16, one GEMM with f32 accumulation.
void linear_bf16_compute(const LinearArgs& a) {
  const float beta = init_bias<float>(a);
  ScratchBuffer<uint16_t> xb, wb;
  const uint16_t* x = as_bf16(a.x, DType::f32, a.m, a.k, xb);
  const uint16_t* w = as_bf16(a.w, a.w_dtype, a.n, a.k, wb);
  gemm_bf16(false, true, a.m, a.n, a.k, x, a.k, w, a.k, beta, static_cast<float*>(a.y), a.n);
}

// Decode-sized products (M <= 4) stay on the GEMV of the chosen level, which reads bf16 weights
// as they are.
template <void (*Gemv)(const LinearArgs&)>
void linear_f32_simd(const LinearArgs& a) {
  if (a.m <= kGemvMaxRows) return Gemv(a);
  if (bf16_compute_for(a.w_dtype)) return linear_bf16_compute(a);
  linear_f32_blas(a);
}

template <void (*Gemv)(const LinearArgs&)>
void linear_half_simd(const LinearArgs& a) {
  if (a.m <= kGemvMaxRows) return Gemv(a);
  if (bf16_compute_for(a.w_dtype)) return linear_bf16_compute(a);
  linear_half_panels(a);
}

struct LinearVariant {
  ops::LinearKernel *f32, *half;
  const char* impl;
};

LinearVariant chosen_variant() {
  if (has_avx512())
    return {&linear_f32_simd<&avx512::gemv>, &linear_half_simd<&avx512::gemv>, "avx512"};
  if (has_avx2()) return {&linear_f32_simd<&avx2::gemv>, &linear_half_simd<&avx2::gemv>, "avx2"};
  return {&linear_f32_blas, &linear_half_panels, kPortable};
}

}  // namespace

void register_linear() {
  auto& reg = kernel_registry();
  const LinearVariant v = chosen_variant();
  reg.add<ops::LinearKernel>("linear", DeviceKind::cpu, DType::f32, v.f32, "", v.impl);
  reg.add<ops::LinearKernel>("linear", DeviceKind::cpu, DType::bf16, v.half, "", v.impl);
  reg.add<ops::LinearKernel>("linear", DeviceKind::cpu, DType::f16, v.half, "", v.impl);
  reg.add<ops::LinearKernel>("linear", DeviceKind::cpu, DType::f64, &linear_f64, "", kPortable);
}

}  // namespace unillm::cpu
