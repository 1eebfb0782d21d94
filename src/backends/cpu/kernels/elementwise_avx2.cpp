// AVX2 f32 add and mul, parallel over 32K-element chunks.
#include "backends/cpu/kernels/elementwise_avx2.h"

#include "backends/cpu/simd/vec_avx2.h"
#include "core/parallel.h"

namespace unillm::cpu::avx2 {
namespace {

template <bool kMul>
void binary(const ops::BinaryArgs& a) {
  const auto* x = static_cast<const float*>(a.a);
  const auto* y = static_cast<const float*>(a.b);
  auto* out = static_cast<float*>(a.out);
  parallel_for(a.n, 1 << 15, [&](int64_t lo, int64_t hi) {
    int64_t i = lo;
    for (; i + 8 <= hi; i += 8) {
      __m256 p = _mm256_loadu_ps(x + i), q = _mm256_loadu_ps(y + i);
      _mm256_storeu_ps(out + i, kMul ? _mm256_mul_ps(p, q) : _mm256_add_ps(p, q));
    }
    for (; i < hi; ++i) out[i] = kMul ? x[i] * y[i] : x[i] + y[i];
  });
}

}  // namespace

void add_f32(const ops::BinaryArgs& a) { binary<false>(a); }
void mul_f32(const ops::BinaryArgs& a) { binary<true>(a); }

}  // namespace unillm::cpu::avx2
