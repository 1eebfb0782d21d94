// AVX-512 vector operations of the flash-style attention loops: the paged kernel's policy
// (dot, axpy, scale, exp_shift; kernels/paged_attention_avx512.cpp) and exp16, which the training
// kernel (kernels/causal_attention_avx512.cpp) shares. Include only from *_avx512.cpp files.
// Intrinsics whose GCC 12 definitions start from an "undefined" register are used in their
// all-ones maskz form (same instruction; see simd/vec_avx512.h).
#pragma once

#include <cmath>
#include <cstdint>

#include "backends/cpu/attention/kv_cache_types.h"
#include "backends/cpu/simd/vec_avx512.h"

namespace unillm::cpu::avx512 {

constexpr __mmask16 kAll16 = 0xffff;

// exp(x) for 16 floats: the same range reduction and polynomial as avx2::exp8 (simd/vec_avx2.h),
// lane for lane the same operations, so both levels give the same value for an element.
static inline __m512 exp16(__m512 x) {
  const __m512 hi = _mm512_set1_ps(88.3762626647949f), lo = _mm512_set1_ps(-88.3762626647949f);
  x = _mm512_maskz_max_ps(kAll16, _mm512_maskz_min_ps(kAll16, x, hi), lo);
  __m512 fx = _mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), _mm512_set1_ps(0.5f));
  fx = _mm512_maskz_roundscale_ps(kAll16, fx, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(0.693359375f), x);
  x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(-2.12194440e-4f), x);
  __m512 y = _mm512_set1_ps(1.9875691500E-4f);
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.3981999507E-3f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(8.3334519073E-3f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(4.1665795894E-2f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.6666665459E-1f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(5.0000001201E-1f));
  y = _mm512_fmadd_ps(y, _mm512_mul_ps(x, x), _mm512_add_ps(x, _mm512_set1_ps(1.0f)));
  const __m512i n = _mm512_add_epi32(_mm512_maskz_cvtps_epi32(kAll16, fx), _mm512_set1_epi32(127));
  return _mm512_mul_ps(y, _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAll16, n, 23)));
}

struct Avx512Ops {
  // A 16-bit cache row (bf16 / f16), widened 16 at a time (masked tails).
  static __m512 load16(const Bf16Cache* p, __mmask16 m) { return load_bf16x16(reinterpret_cast<const uint16_t*>(p), m); }
  static __m512 load16(const F16Cache* p, __mmask16 m) { return load_f16x16(reinterpret_cast<const uint16_t*>(p), m); }
  template <typename C>
  static float dot(const float* a, const C* b, int64_t n) {
    __m512 s0 = _mm512_setzero_ps(), s1 = s0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
      s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), load16(b + i, kAll16), s0);
      s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), load16(b + i + 16, kAll16), s1);
    }
    for (; i < n; i += 16) {
      const __mmask16 m = tail_mask16(n - i);
      s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), load16(b + i, m), s0);
    }
    return hsum16(_mm512_add_ps(s0, s1));
  }
  template <typename C>
  static void axpy(float* acc, float p, const C* x, int64_t n) {
    const __m512 vp = _mm512_set1_ps(p);
    for (int64_t i = 0; i < n; i += 16) {
      const __mmask16 m = tail_mask16(n - i);
      _mm512_mask_storeu_ps(acc + i, m, _mm512_fmadd_ps(vp, load16(x + i, m), _mm512_maskz_loadu_ps(m, acc + i)));
    }
  }
  static __m512 load16(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }

  // out[t] = scale · q · k_t for n keys k_t = k + t · stride. Head dims that are a multiple of 16
  // up to 128 keep q in registers and reduce four dots together (one shuffle tree for four
  // instead of a horizontal sum each: at D = 64 the sum cost as much as the dot).
  template <typename C>
  static void dots(const float* q, const C* k, int64_t stride, int64_t n, int64_t D, float scale, float* out) {
    switch (D % 16 == 0 ? D / 16 : 0) {
      case 1: return dots_n<1>(q, k, stride, n, scale, out);
      case 2: return dots_n<2>(q, k, stride, n, scale, out);
      case 3: return dots_n<3>(q, k, stride, n, scale, out);
      case 4: return dots_n<4>(q, k, stride, n, scale, out);
      case 5: return dots_n<5>(q, k, stride, n, scale, out);
      case 6: return dots_n<6>(q, k, stride, n, scale, out);
      case 7: return dots_n<7>(q, k, stride, n, scale, out);
      case 8: return dots_n<8>(q, k, stride, n, scale, out);
      default:
        for (int64_t t = 0; t < n; ++t) out[t] = dot(q, k + t * stride, D) * scale;
    }
  }
  // acc += Σ_t p[t] · x_t for n rows x_t = x + t · stride, acc held in registers across the rows
  // (same per-element order of operations as n axpy calls).
  template <typename C>
  static void axpy_rows(float* acc, const float* p, const C* x, int64_t stride, int64_t n, int64_t D) {
    switch (D % 16 == 0 ? D / 16 : 0) {
      case 1: return axpy_rows_n<1>(acc, p, x, stride, n);
      case 2: return axpy_rows_n<2>(acc, p, x, stride, n);
      case 3: return axpy_rows_n<3>(acc, p, x, stride, n);
      case 4: return axpy_rows_n<4>(acc, p, x, stride, n);
      case 5: return axpy_rows_n<5>(acc, p, x, stride, n);
      case 6: return axpy_rows_n<6>(acc, p, x, stride, n);
      case 7: return axpy_rows_n<7>(acc, p, x, stride, n);
      case 8: return axpy_rows_n<8>(acc, p, x, stride, n);
      default:
        for (int64_t t = 0; t < n; ++t) axpy(acc, p[t], x + t * stride, D);
    }
  }
  template <int NJ, typename C>
  static void dots_n(const float* q, const C* k, int64_t stride, int64_t n, float scale, float* out) {
    __m512 qv[NJ];
#pragma GCC unroll 8
    for (int j = 0; j < NJ; ++j) qv[j] = _mm512_loadu_ps(q + 16 * j);
    int64_t t = 0;
    for (; t + 4 <= n; t += 4) {
      const C* k0 = k + t * stride;
      __m512 a0 = _mm512_mul_ps(qv[0], load16(k0, kAll16)), a1 = _mm512_mul_ps(qv[0], load16(k0 + stride, kAll16));
      __m512 a2 = _mm512_mul_ps(qv[0], load16(k0 + 2 * stride, kAll16));
      __m512 a3 = _mm512_mul_ps(qv[0], load16(k0 + 3 * stride, kAll16));
#pragma GCC unroll 8
      for (int j = 1; j < NJ; ++j) {
        a0 = _mm512_fmadd_ps(qv[j], load16(k0 + 16 * j, kAll16), a0);
        a1 = _mm512_fmadd_ps(qv[j], load16(k0 + stride + 16 * j, kAll16), a1);
        a2 = _mm512_fmadd_ps(qv[j], load16(k0 + 2 * stride + 16 * j, kAll16), a2);
        a3 = _mm512_fmadd_ps(qv[j], load16(k0 + 3 * stride + 16 * j, kAll16), a3);
      }
      _mm_storeu_ps(out + t, _mm_mul_ps(hsum4x16(a0, a1, a2, a3), _mm_set1_ps(scale)));
    }
    for (; t < n; ++t) {
      const C* kt = k + t * stride;
      __m512 a = _mm512_mul_ps(qv[0], load16(kt, kAll16));
#pragma GCC unroll 8
      for (int j = 1; j < NJ; ++j) a = _mm512_fmadd_ps(qv[j], load16(kt + 16 * j, kAll16), a);
      out[t] = hsum16(a) * scale;
    }
  }
  template <int NJ, typename C>
  static void axpy_rows_n(float* acc, const float* p, const C* x, int64_t stride, int64_t n) {
    __m512 a[NJ];
#pragma GCC unroll 8
    for (int j = 0; j < NJ; ++j) a[j] = _mm512_loadu_ps(acc + 16 * j);
    // (the unroll pragmas keep a[] in registers: without them GCC 12 kept it on the stack for
    // the 16-bit caches, a load-fma-store chain per row that made f16 slower than f32)
    for (int64_t t = 0; t < n; ++t) {
      const __m512 vp = _mm512_set1_ps(p[t]);
      const C* xt = x + t * stride;
#pragma GCC unroll 8
      for (int j = 0; j < NJ; ++j) a[j] = _mm512_fmadd_ps(vp, load16(xt + 16 * j, kAll16), a[j]);
    }
#pragma GCC unroll 8
    for (int j = 0; j < NJ; ++j) _mm512_storeu_ps(acc + 16 * j, a[j]);
  }
  // The horizontal sums of a, b, c, d as {Σa, Σb, Σc, Σd}: pairs of 32-bit and then 64-bit
  // interleaves add within each 128-bit lane, then the four lanes are added.
  static __m128 hsum4x16(__m512 a, __m512 b, __m512 c, __m512 d) {
    const __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));  // a02 b02 a13 b13
    const __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));  // c02 d02 c13 d13
    const __m512d abd = _mm512_castps_pd(ab), cdd = _mm512_castps_pd(cd);
    const __m512 s = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(abd, cdd)),
                                   _mm512_castpd_ps(_mm512_unpackhi_pd(abd, cdd)));  // a b c d per lane
    const __m256 h = _mm256_add_ps(_mm512_maskz_extractf32x8_ps(0xff, s, 0), _mm512_maskz_extractf32x8_ps(0xff, s, 1));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  }

  static float dot(const float* a, const float* b, int64_t n) {
    __m512 s0 = _mm512_setzero_ps(), s1 = s0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
      s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
      s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
    }
    for (; i < n; i += 16) {
      const __mmask16 m = tail_mask16(n - i);
      s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), s0);
    }
    return hsum16(_mm512_add_ps(s0, s1));
  }
  static void axpy(float* acc, float p, const float* x, int64_t n) {
    const __m512 vp = _mm512_set1_ps(p);
    for (int64_t i = 0; i < n; i += 16) {
      const __mmask16 m = tail_mask16(n - i);
      _mm512_mask_storeu_ps(acc + i, m, _mm512_fmadd_ps(vp, _mm512_maskz_loadu_ps(m, x + i),
                                                        _mm512_maskz_loadu_ps(m, acc + i)));
    }
  }
  static void scale(float* acc, float c, int64_t n) {
    const __m512 vc = _mm512_set1_ps(c);
    for (int64_t i = 0; i < n; i += 16) {
      const __mmask16 m = tail_mask16(n - i);
      _mm512_mask_storeu_ps(acc + i, m, _mm512_mul_ps(vc, _mm512_maskz_loadu_ps(m, acc + i)));
    }
  }
  static float exp_shift(float* s, int64_t n, float m) {
    const __m512 vm = _mm512_set1_ps(m);
    __m512 sum = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
      const __mmask16 k = tail_mask16(n - i);
      const __m512 e = _mm512_maskz_mov_ps(k, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + i), vm)));
      _mm512_mask_storeu_ps(s + i, k, e);
      sum = _mm512_add_ps(sum, e);
    }
    return hsum16(sum);
  }
};

}  // namespace unillm::cpu::avx512
