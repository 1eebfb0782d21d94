// AVX2 softmax for f32 rows: max, exp-and-sum, scale.
#include "backends/cpu/kernels/softmax_avx2.h"

#include <algorithm>
#include <cmath>

#include "backends/cpu/simd/vec_avx2.h"
#include "core/parallel.h"

namespace unillm::cpu::avx2 {
namespace {

void softmax_row(const float* x, float* y, int64_t n) {
  __m256 vmax = _mm256_set1_ps(-INFINITY);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(x + i));
  float mx = hmax(vmax);
  for (; i < n; ++i) mx = std::max(mx, x[i]);
  const __m256 vm = _mm256_set1_ps(mx);
  __m256 vsum = _mm256_setzero_ps();
  for (i = 0; i + 8 <= n; i += 8) {
    __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
    _mm256_storeu_ps(y + i, e);
    vsum = _mm256_add_ps(vsum, e);
  }
  float sum = hsum(vsum);
  for (; i < n; ++i) sum += (y[i] = std::exp(x[i] - mx));
  const float inv = 1.0f / sum;
  const __m256 vi = _mm256_set1_ps(inv);
  for (i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), vi));
  for (; i < n; ++i) y[i] *= inv;
}

}  // namespace

void softmax_f32(const ops::SoftmaxArgs& a) {
  const auto* x = static_cast<const float*>(a.x);
  auto* y = static_cast<float*>(a.y);
  parallel_for(a.rows, std::max<int64_t>(1, 16384 / a.cols), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) softmax_row(x + r * a.cols, y + r * a.cols, a.cols);
  });
}

}  // namespace unillm::cpu::avx2
