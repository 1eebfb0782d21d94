// Row-major GEMM helpers for the backward kernels (and the f64 cross-entropy), over OpenBLAS.
// A weight operand may be bf16/f16: it is converted to f32 one panel of rows at a time (about
// 8 MiB, simd/convert.h half_panel_rows), never the whole matrix. Every result is overwritten
// (beta = 0) unless `accumulate`. (The f32 cross-entropy has its own: cross_entropy_gemm.h.)
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace unillm::cpu {

// c[m, n] (ldc) = a[m, k] · wᵀ, w [n, k] in f64.
void gemm_a_wt(const double* a, const void* w, DType wt, double* c, int64_t m, int64_t n,
               int64_t k, int64_t ldc);
// c[m, k] = a[m, n] (lda) · w, w [n, k] in f32/bf16/f16.
void gemm_a_w(const float* a, int64_t lda, const void* w, DType wt, float* c, int64_t m, int64_t n,
              int64_t k);
void gemm_a_w(const double* a, int64_t lda, const void* w, DType wt, double* c, int64_t m,
              int64_t n, int64_t k);
// c[n, k] = (or +=, when accumulate) a[m, n]ᵀ · b[m, k].
void gemm_at_b(const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k,
               bool accumulate);
void gemm_at_b(const double* a, const double* b, double* c, int64_t m, int64_t n, int64_t k,
               bool accumulate);

// Splits [0, n) into parts contiguous ranges, the same split for a given thread count, and runs
// fn(part, begin, end) for each part in parallel. parts_for() picks min(threads, n / grain).
int64_t parts_for(int64_t n, int64_t grain);
template <typename Fn>
void for_parts(int64_t n, int64_t parts, Fn&& fn);

}  // namespace unillm::cpu

#include "core/parallel.h"

template <typename Fn>
void unillm::cpu::for_parts(int64_t n, int64_t parts, Fn&& fn) {
  parallel_for(parts, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t p = lo; p < hi; ++p) fn(p, n * p / parts, n * (p + 1) / parts);
  });
}
