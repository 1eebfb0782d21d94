// AVX2 rms_norm backward row for f32: Σx² and Σ g·w·x in vector accumulators, then dx and the
// per-thread dw partial in one pass.
#include "backends/cpu/kernels/rms_norm_backward_avx2.h"

#include <cmath>

#include "backends/cpu/simd/vec_avx2.h"

namespace unillm::cpu::avx2 {

void rms_norm_backward_row(const float* g, const float* x, const float* w, float* dx,
                           float* dw_acc, int64_t dim, float eps) {
  __m256 ss = _mm256_setzero_ps(), dot = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= dim; i += 8) {
    __m256 xv = _mm256_loadu_ps(x + i);
    ss = _mm256_fmadd_ps(xv, xv, ss);
    dot = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_loadu_ps(g + i), _mm256_loadu_ps(w + i)), xv, dot);
  }
  float s = hsum(ss), d = hsum(dot);
  for (; i < dim; ++i) {
    s += x[i] * x[i];
    d += g[i] * w[i] * x[i];
  }
  const float inv = 1.0f / std::sqrt(s / static_cast<float>(dim) + eps);
  const float k = d * inv * inv * inv / static_cast<float>(dim);
  const __m256 vi = _mm256_set1_ps(inv), vk = _mm256_set1_ps(k);
  for (i = 0; i + 8 <= dim; i += 8) {
    __m256 xv = _mm256_loadu_ps(x + i), gv = _mm256_loadu_ps(g + i);
    if (dx)
      _mm256_storeu_ps(dx + i, _mm256_fnmadd_ps(xv, vk, _mm256_mul_ps(vi, _mm256_mul_ps(gv, _mm256_loadu_ps(w + i)))));
    if (dw_acc)
      _mm256_storeu_ps(dw_acc + i, _mm256_fmadd_ps(_mm256_mul_ps(gv, xv), vi, _mm256_loadu_ps(dw_acc + i)));
  }
  for (; i < dim; ++i) {
    if (dx) dx[i] = inv * (g[i] * w[i]) - x[i] * k;
    if (dw_acc) dw_acc[i] += g[i] * x[i] * inv;
  }
}

}  // namespace unillm::cpu::avx2
