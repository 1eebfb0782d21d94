// AVX2 swiglu backward for f32: s = 1/(1 + exp(−g)); d_gate = dy·u·s·(1 + g·(1 − s)), d_up = dy·g·s.
#include "backends/cpu/kernels/swiglu_backward_avx2.h"

#include <algorithm>
#include <cmath>

#include "backends/cpu/simd/vec_avx2.h"
#include "core/parallel.h"

namespace unillm::cpu::avx2 {
namespace {

void swiglu_backward_row(const float* g, const float* u, const float* dy, float* dg, float* du,
                         int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 gv = _mm256_loadu_ps(g + i), uv = _mm256_loadu_ps(u + i), dv = _mm256_loadu_ps(dy + i);
    __m256 s = _mm256_div_ps(one, _mm256_add_ps(one, exp8(_mm256_sub_ps(zero, gv))));
    __m256 t = _mm256_fmadd_ps(gv, _mm256_sub_ps(one, s), one);  // 1 + g(1 − s)
    _mm256_storeu_ps(dg + i, _mm256_mul_ps(_mm256_mul_ps(dv, uv), _mm256_mul_ps(s, t)));
    _mm256_storeu_ps(du + i, _mm256_mul_ps(dv, _mm256_mul_ps(gv, s)));
  }
  for (; i < n; ++i) {
    float s = 1.0f / (1.0f + std::exp(-g[i]));
    dg[i] = dy[i] * u[i] * (s * (1.0f + g[i] * (1.0f - s)));
    du[i] = dy[i] * (g[i] * s);
  }
}

}  // namespace

void swiglu_backward_f32(const ops::SwigluBackwardArgs& a) {
  const auto* gu = static_cast<const float*>(a.gate_up);
  const auto* dy = static_cast<const float*>(a.dout);
  auto* dgu = static_cast<float*>(a.dgate_up);
  const int64_t f = a.ffn;
  parallel_for(a.rows, std::max<int64_t>(1, 8192 / f), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r)
      swiglu_backward_row(gu + r * 2 * f, gu + r * 2 * f + f, dy + r * f, dgu + r * 2 * f,
                          dgu + r * 2 * f + f, f);
  });
}

}  // namespace unillm::cpu::avx2
