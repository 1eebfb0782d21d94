// AVX2 rms_norm for f32 x: sum of squares in four f32 vector accumulators, then (x · 1/rms) · w as
// HF orders it. The weight is converted to f32 once per call.
#include "backends/cpu/kernels/rms_norm_avx2.h"

#include <cmath>
#include <vector>

#include "backends/cpu/simd/convert_avx2.h"
#include "backends/cpu/simd/vec_avx2.h"
#include "core/parallel.h"

namespace unillm::cpu::avx2 {
namespace {

float sum_squares(const float* x, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
    __m256 c = _mm256_loadu_ps(x + i + 16), d = _mm256_loadu_ps(x + i + 24);
    s0 = _mm256_fmadd_ps(a, a, s0);
    s1 = _mm256_fmadd_ps(b, b, s1);
    s2 = _mm256_fmadd_ps(c, c, s2);
    s3 = _mm256_fmadd_ps(d, d, s3);
  }
  for (; i + 8 <= n; i += 8) {
    __m256 a = _mm256_loadu_ps(x + i);
    s0 = _mm256_fmadd_ps(a, a, s0);
  }
  if (i < n) {
    __m256 a = _mm256_maskload_ps(x + i, tail_mask(n - i));
    s1 = _mm256_fmadd_ps(a, a, s1);
  }
  return hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
}

void scale_row(const float* x, const float* w, float inv, float* y, int64_t n) {
  const __m256 vi = _mm256_set1_ps(inv);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vi),
                                          _mm256_loadu_ps(w + i)));
  for (; i < n; ++i) y[i] = x[i] * inv * w[i];
}

void add_row(const float* x, const float* d, float* s, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(s + i, _mm256_add_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(d + i)));
  for (; i < n; ++i) s[i] = x[i] + d[i];
}

}  // namespace

void rms_norm_f32(const ops::RmsNormArgs& a) {
  std::vector<float> w(static_cast<size_t>(a.dim));
  to_f32(a.w, a.w_dtype, w.data(), a.dim);
  const auto* x = static_cast<const float*>(a.x);
  auto* y = static_cast<float*>(a.y);
  parallel_for(a.rows, std::max<int64_t>(1, 16384 / a.dim), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      float ms = sum_squares(x + r * a.dim, a.dim) / static_cast<float>(a.dim);
      float inv = 1.0f / std::sqrt(ms + a.eps);
      scale_row(x + r * a.dim, w.data(), inv, y + r * a.dim, a.dim);
    }
  });
}

void add_rms_norm_f32(const ops::AddRmsNormArgs& a) {
  std::vector<float> w(static_cast<size_t>(a.dim));
  to_f32(a.w, a.w_dtype, w.data(), a.dim);
  parallel_for(a.rows, std::max<int64_t>(1, 16384 / a.dim), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      float* s = a.sum + r * a.dim;
      add_row(a.x + r * a.dim, a.delta + r * a.dim, s, a.dim);  // the row stays in L1 for the norm
      float ms = sum_squares(s, a.dim) / static_cast<float>(a.dim);
      float inv = 1.0f / std::sqrt(ms + a.eps);
      scale_row(s, w.data(), inv, a.y + r * a.dim, a.dim);
    }
  });
}

}  // namespace unillm::cpu::avx2
