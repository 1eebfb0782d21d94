// AVX2/FMA instantiation of the training attention loops (attention/attention_train_*.h) for f32,
// forward and backward: a register-blocked 6×16 GEMM micro-kernel for the tile products and the
// vectorised exp.
#include "backends/cpu/kernels/causal_attention_avx2.h"

#include "backends/cpu/attention/attention_avx2_ops.h"
#include "backends/cpu/attention/attention_train_backward.h"

namespace unillm::cpu::avx2 {
namespace {

// C[i .. i + MR, j .. j + 16) of g; kTail: columns beyond n are masked (m0, m1). The row loops
// are unrolled so the 2·MR accumulators stay in registers.
template <int MR, bool kTail, bool kTrans>
void gemm_block(const Gemm<float>& g, int64_t i, int64_t j, __m256i m0, __m256i m1) {
  __m256 c0[MR], c1[MR];
  float* cp = g.c + i * g.ldc + j;
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r) {
    if (!g.accumulate) {
      c0[r] = c1[r] = _mm256_setzero_ps();
    } else if (kTail) {
      c0[r] = _mm256_maskload_ps(cp + r * g.ldc, m0);
      c1[r] = _mm256_maskload_ps(cp + r * g.ldc + 8, m1);
    } else {
      c0[r] = _mm256_loadu_ps(cp + r * g.ldc);
      c1[r] = _mm256_loadu_ps(cp + r * g.ldc + 8);
    }
  }
  const float* bp = g.b + j;
  for (int64_t p = 0; p < g.k; ++p, bp += g.ldb) {
    const __m256 b0 = kTail ? _mm256_maskload_ps(bp, m0) : _mm256_loadu_ps(bp);
    const __m256 b1 = kTail ? _mm256_maskload_ps(bp + 8, m1) : _mm256_loadu_ps(bp + 8);
    const float* ap = kTrans ? g.a + p * g.lda + i : g.a + i * g.lda + p;
#pragma GCC unroll 6
    for (int r = 0; r < MR; ++r) {
      const __m256 av = _mm256_broadcast_ss(kTrans ? ap + r : ap + r * g.lda);
      c0[r] = _mm256_fmadd_ps(av, b0, c0[r]);
      c1[r] = _mm256_fmadd_ps(av, b1, c1[r]);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r) {
    if (kTail) {
      _mm256_maskstore_ps(cp + r * g.ldc, m0, c0[r]);
      _mm256_maskstore_ps(cp + r * g.ldc + 8, m1, c1[r]);
    } else {
      _mm256_storeu_ps(cp + r * g.ldc, c0[r]);
      _mm256_storeu_ps(cp + r * g.ldc + 8, c1[r]);
    }
  }
}

template <bool kTail, bool kTrans>
void gemm_rows(const Gemm<float>& g, int64_t j, __m256i m0, __m256i m1) {
  int64_t i = 0;
  for (; i + 6 <= g.m; i += 6) gemm_block<6, kTail, kTrans>(g, i, j, m0, m1);
  switch (g.m - i) {
    case 5:
      gemm_block<5, kTail, kTrans>(g, i, j, m0, m1);
      break;
    case 4:
      gemm_block<4, kTail, kTrans>(g, i, j, m0, m1);
      break;
    case 3:
      gemm_block<3, kTail, kTrans>(g, i, j, m0, m1);
      break;
    case 2:
      gemm_block<2, kTail, kTrans>(g, i, j, m0, m1);
      break;
    case 1:
      gemm_block<1, kTail, kTrans>(g, i, j, m0, m1);
      break;
    default:
      break;
  }
}

template <bool kTrans>
void gemm_cols(const Gemm<float>& g) {
  const __m256i all = _mm256_set1_epi32(-1);
  int64_t j = 0;
  for (; j + 16 <= g.n; j += 16) gemm_rows<false, kTrans>(g, j, all, all);
  if (j < g.n) {
    const int64_t rest = g.n - j;
    gemm_rows<true, kTrans>(g, j, tail_mask(std::min<int64_t>(rest, 8)),
                            tail_mask(std::max<int64_t>(rest - 8, 0)));
  }
}

struct TrainOps {
  static void gemm(const Gemm<float>& g) {
    if (g.m <= 0 || g.n <= 0) return;
    if (g.a_trans)
      gemm_cols<true>(g);
    else
      gemm_cols<false>(g);
  }
  // exp(s − m) in place and its sum. Unlike Avx2Ops::exp_shift the tail goes through the same
  // vector exp (masked), so an element's value does not depend on the block length n: the two
  // backward schedules cut the key blocks differently and must agree bit for bit.
  static float exp_shift(float* s, int64_t n, float m) {
    const __m256 vm = _mm256_set1_ps(m);
    __m256 sum = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + i), vm));
      _mm256_storeu_ps(s + i, e);
      sum = _mm256_add_ps(sum, e);
    }
    if (i < n) {
      const __m256i mk = tail_mask(n - i);
      const __m256 e = _mm256_and_ps(exp8(_mm256_sub_ps(_mm256_maskload_ps(s + i, mk), vm)),
                                     _mm256_castsi256_ps(mk));
      _mm256_maskstore_ps(s + i, mk, e);
      sum = _mm256_add_ps(sum, e);
    }
    return hsum(sum);
  }
  static float max(const float* s, int64_t n) {
    if (n < 8) {
      float m = s[0];
      for (int64_t j = 1; j < n; ++j) m = std::max(m, s[j]);
      return m;
    }
    __m256 m = _mm256_loadu_ps(s);
    int64_t j = 8;
    for (; j + 8 <= n; j += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(s + j));
    if (j < n) m = _mm256_max_ps(m, _mm256_loadu_ps(s + n - 8));  // overlaps: max is idempotent
    return hmax(m);
  }
  // Element-wise the same operations as the portable loops, so results are bit-identical.
  static void scale_to(float* dst, const float* src, float c, int64_t n) {
    const __m256 vc = _mm256_set1_ps(c);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_mul_ps(_mm256_loadu_ps(src + i), vc));
    for (; i < n; ++i) dst[i] = src[i] * c;
  }
  static void ds_row(float* ds, const float* p, float dr, int64_t n) {
    const __m256 vd = _mm256_set1_ps(dr);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
      _mm256_storeu_ps(ds + j, _mm256_mul_ps(_mm256_loadu_ps(p + j),
                                             _mm256_sub_ps(_mm256_loadu_ps(ds + j), vd)));
    for (; j < n; ++j) ds[j] = p[j] * (ds[j] - dr);
  }
  // xt[d·ldt + t] = x[t·ldx + d]: 8×8 register transposes, scalar edges.
  static void transpose(const float* x, int64_t ldx, int64_t rows, int64_t cols, float* xt,
                        int64_t ldt) {
    int64_t t = 0;
    for (; t + 8 <= rows; t += 8) {
      int64_t d = 0;
      for (; d + 8 <= cols; d += 8) transpose8(x + t * ldx + d, ldx, xt + d * ldt + t, ldt);
      for (; d < cols; ++d)
        for (int64_t u = t; u < t + 8; ++u) xt[d * ldt + u] = x[u * ldx + d];
    }
    for (; t < rows; ++t)
      for (int64_t d = 0; d < cols; ++d) xt[d * ldt + t] = x[t * ldx + d];
  }

 private:
  static void transpose8(const float* x, int64_t ldx, float* y, int64_t ldy) {
    __m256 r[8], u[8];
    for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(x + i * ldx);
    for (int i = 0; i < 8; i += 2) {
      u[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
      u[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
      r[i] = _mm256_shuffle_ps(u[i], u[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
      r[i + 1] = _mm256_shuffle_ps(u[i], u[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
      r[i + 2] = _mm256_shuffle_ps(u[i + 1], u[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
      r[i + 3] = _mm256_shuffle_ps(u[i + 1], u[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int i = 0; i < 4; ++i) {
      _mm256_storeu_ps(y + i * ldy, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
      _mm256_storeu_ps(y + (i + 4) * ldy, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
    }
  }
};

}  // namespace

void causal_attention_f32(const ops::CausalAttentionArgs& a) {
  causal_attention_run<float, TrainOps>(a);
}

void causal_attention_backward_f32(const ops::CausalAttentionBackwardArgs& a) {
  causal_attention_backward_run<float, TrainOps>(a);
}

}  // namespace unillm::cpu::avx2
