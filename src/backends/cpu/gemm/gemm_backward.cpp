// GEMM helpers over the GEMM provider (provider.h) for the backward kernels: bf16/f16 weights are converted panel by
// panel (parallel), f32/f64 go straight to sgemm/dgemm.
#include "backends/cpu/gemm/gemm_backward.h"

#include <algorithm>
#include <vector>

#include "backends/cpu/gemm/provider.h"
#include "backends/cpu/scratch.h"
#include "backends/cpu/simd/convert.h"
#include "core/error.h"

namespace unillm::cpu {
namespace {

// Converts rows [r0, r0 + rows) of w [*, k] to f32 into buf.
void convert_panel(const void* w, DType wt, int64_t r0, int64_t rows, int64_t k, float* buf) {
  const auto* base = static_cast<const char*>(w);
  const int64_t es = static_cast<int64_t>(dtype_size(wt));
  parallel_for(rows, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) to_f32(base + (r0 + r) * k * es, wt, buf + r * k, k);
  });
}

}  // namespace

int64_t parts_for(int64_t n, int64_t grain) {
  if (in_parallel_region()) return 1;
  const int64_t by_grain = n / std::max<int64_t>(1, grain);
  return std::max<int64_t>(1, std::min<int64_t>(num_threads(), by_grain));
}

void gemm_a_wt(const double* a, const void* w, DType wt, double* c, int64_t m, int64_t n,
               int64_t k, int64_t ldc) {
  UNILLM_CHECK(wt == DType::f64);
  dgemm(false, true, m, n, k, 1.0, a, k, static_cast<const double*>(w), k, 0.0, c, ldc);
}

void gemm_a_w(const float* a, int64_t lda, const void* w, DType wt, float* c, int64_t m, int64_t n,
              int64_t k) {
  if (wt == DType::f32) {
    sgemm(false, false, m, k, n, 1.0f, a, lda, static_cast<const float*>(w), k, 0.0f, c, k);
    return;
  }
  const int64_t panel = half_panel_rows(n, k);
  Scratch<float> buf(panel * k);
  for (int64_t n0 = 0; n0 < n; n0 += panel) {
    const int64_t rows = std::min(panel, n - n0);
    convert_panel(w, wt, n0, rows, k, buf.data());
    sgemm(false, false, m, k, rows, 1.0f, a + n0, lda, buf.data(), k, n0 == 0 ? 0.0f : 1.0f, c, k);
  }
}

void gemm_a_w(const double* a, int64_t lda, const void* w, DType wt, double* c, int64_t m,
              int64_t n, int64_t k) {
  UNILLM_CHECK(wt == DType::f64);
  dgemm(false, false, m, k, n, 1.0, a, lda, static_cast<const double*>(w), k, 0.0, c, k);
}

void gemm_at_b(const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k,
               bool accumulate) {
  sgemm(true, false, n, k, m, 1.0f, a, n, b, k, accumulate ? 1.0f : 0.0f, c, k);
}

void gemm_at_b(const double* a, const double* b, double* c, int64_t m, int64_t n, int64_t k,
               bool accumulate) {
  dgemm(true, false, n, k, m, 1.0, a, n, b, k, accumulate ? 1.0 : 0.0, c, k);
}

}  // namespace unillm::cpu
