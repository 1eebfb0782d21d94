// AVX2/FMA vector operations of the flash-style attention loops (dot, axpy, scale, exp_shift),
// shared by the paged (kernels/paged_attention_avx2.cpp) and training
// (kernels/causal_attention_avx2.cpp) kernels. Include only from *_avx2.cpp files: everything here
// is compiled for AVX2.
#pragma once

#include <cmath>
#include <cstdint>

#include "backends/cpu/attention/kv_cache_types.h"
#include "backends/cpu/simd/vec_avx2.h"

namespace unillm::cpu::avx2 {

struct Avx2Ops {
  // A 16-bit cache row (bf16 / f16), widened 8 at a time; the tail element by element.
  static __m256 load8(const Bf16Cache* p) { return load_bf16x8(reinterpret_cast<const uint16_t*>(p)); }
  static __m256 load8(const F16Cache* p) { return load_f16x8(reinterpret_cast<const uint16_t*>(p)); }
  template <typename C>
  static float dot(const float* a, const C* b, int64_t n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = s0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
      s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), load8(b + i), s0);
      s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), load8(b + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), load8(b + i), s0);
    float t = hsum(_mm256_add_ps(s0, s1));
    for (; i < n; ++i) t += a[i] * cache_to_f32(b[i]);
    return t;
  }
  template <typename C>
  static void axpy(float* acc, float p, const C* x, int64_t n) {
    const __m256 vp = _mm256_set1_ps(p);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(vp, load8(x + i), _mm256_loadu_ps(acc + i)));
    for (; i < n; ++i) acc[i] += p * cache_to_f32(x[i]);
  }
  static float dot(const float* a, const float* b, int64_t n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = s0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
      s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
      s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8)
      s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    if (i < n) {
      __m256i mk = tail_mask(n - i);
      s1 = _mm256_fmadd_ps(_mm256_maskload_ps(a + i, mk), _mm256_maskload_ps(b + i, mk), s1);
    }
    return hsum(_mm256_add_ps(s0, s1));
  }
  static void axpy(float* acc, float p, const float* x, int64_t n) {
    const __m256 vp = _mm256_set1_ps(p);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(acc + i,
                       _mm256_fmadd_ps(vp, _mm256_loadu_ps(x + i), _mm256_loadu_ps(acc + i)));
    for (; i < n; ++i) acc[i] += p * x[i];
  }
  static void scale(float* acc, float c, int64_t n) {
    const __m256 vc = _mm256_set1_ps(c);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(acc + i, _mm256_mul_ps(vc, _mm256_loadu_ps(acc + i)));
    for (; i < n; ++i) acc[i] *= c;
  }
  static float exp_shift(float* s, int64_t n, float m) {
    const __m256 vm = _mm256_set1_ps(m);
    __m256 sum = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + i), vm));
      _mm256_storeu_ps(s + i, e);
      sum = _mm256_add_ps(sum, e);
    }
    float t = hsum(sum);
    for (; i < n; ++i) t += (s[i] = std::exp(s[i] - m));
    return t;
  }
};

}  // namespace unillm::cpu::avx2
