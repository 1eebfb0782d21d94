// AVX2 swiglu for f32: silu(g) = g / (1 + exp(-g)), times up.
#include "backends/cpu/kernels/swiglu_avx2.h"

#include <algorithm>
#include <cmath>

#include "backends/cpu/simd/vec_avx2.h"
#include "core/parallel.h"

namespace unillm::cpu::avx2 {
namespace {

void swiglu_row(const float* g, const float* u, float* out, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 gv = _mm256_loadu_ps(g + i);
    __m256 den = _mm256_add_ps(one, exp8(_mm256_sub_ps(zero, gv)));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_div_ps(gv, den), _mm256_loadu_ps(u + i)));
  }
  for (; i < n; ++i) out[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

}  // namespace

void swiglu_f32(const ops::SwigluArgs& a) {
  const auto* gu = static_cast<const float*>(a.gate_up);
  auto* out = static_cast<float*>(a.out);
  parallel_for(a.rows, std::max<int64_t>(1, 16384 / a.ffn), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r)
      swiglu_row(gu + r * 2 * a.ffn, gu + r * 2 * a.ffn + a.ffn, out + r * a.ffn, a.ffn);
  });
}

}  // namespace unillm::cpu::avx2
