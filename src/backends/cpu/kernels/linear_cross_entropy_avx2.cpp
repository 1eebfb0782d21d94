// AVX2 row functions of the fused cross-entropy for f32 logits: logsumexp (max, then Σ exp in four
// vector accumulators) and the scaled softmax written in place.
#include "backends/cpu/kernels/linear_cross_entropy_avx2.h"

#include <algorithm>
#include <cmath>

#include "backends/cpu/simd/vec_avx2.h"

namespace unillm::cpu::avx2 {

float row_logsumexp(const float* l, int64_t n) {
  __m256 vmax = _mm256_set1_ps(-INFINITY);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(l + i));
  float mx = hmax(vmax);
  for (; i < n; ++i) mx = std::max(mx, l[i]);
  const __m256 vm = _mm256_set1_ps(mx);
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  for (i = 0; i + 32 <= n; i += 32) {
    s0 = _mm256_add_ps(s0, exp8(_mm256_sub_ps(_mm256_loadu_ps(l + i), vm)));
    s1 = _mm256_add_ps(s1, exp8(_mm256_sub_ps(_mm256_loadu_ps(l + i + 8), vm)));
    s2 = _mm256_add_ps(s2, exp8(_mm256_sub_ps(_mm256_loadu_ps(l + i + 16), vm)));
    s3 = _mm256_add_ps(s3, exp8(_mm256_sub_ps(_mm256_loadu_ps(l + i + 24), vm)));
  }
  for (; i + 8 <= n; i += 8) s0 = _mm256_add_ps(s0, exp8(_mm256_sub_ps(_mm256_loadu_ps(l + i), vm)));
  float sum = hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  for (; i < n; ++i) sum += std::exp(l[i] - mx);
  return mx + std::log(sum);
}

void row_softmax_scaled(float* l, int64_t n, float lse, float scale) {
  const __m256 vl = _mm256_set1_ps(lse), vs = _mm256_set1_ps(scale);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(l + i, _mm256_mul_ps(exp8(_mm256_sub_ps(_mm256_loadu_ps(l + i), vl)), vs));
  for (; i < n; ++i) l[i] = std::exp(l[i] - lse) * scale;
}

}  // namespace unillm::cpu::avx2
