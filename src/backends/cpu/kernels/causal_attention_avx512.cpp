// AVX-512 instantiation of the training attention loops (attention/attention_train_*.h) for f32,
// forward and backward: a register-blocked 8×32 GEMM micro-kernel (two zmm per row, 16
// accumulators) for the tile products and the 16-lane exp. Each function is lane for lane the
// same arithmetic for every block length, as the AVX2 policy's (the two backward schedules must
// agree bit for bit).
#include "backends/cpu/kernels/causal_attention_avx512.h"

#include "backends/cpu/attention/attention_avx512_ops.h"
#include "backends/cpu/attention/attention_train_backward.h"

namespace unillm::cpu::avx512 {
namespace {

constexpr int kMr = 8;

// C[i .. i + MR, j .. j + 32) of g; columns beyond n are masked by m0, m1 (all ones when whole).
// The row loops are unrolled so the 2·MR accumulators stay in registers.
template <int MR, bool kTrans>
void gemm_block(const Gemm<float>& g, int64_t i, int64_t j, __mmask16 m0, __mmask16 m1) {
  __m512 c0[MR], c1[MR];
  float* cp = g.c + i * g.ldc + j;
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    if (g.accumulate) {
      c0[r] = _mm512_maskz_loadu_ps(m0, cp + r * g.ldc);
      c1[r] = _mm512_maskz_loadu_ps(m1, cp + r * g.ldc + 16);
    } else {
      c0[r] = c1[r] = _mm512_setzero_ps();
    }
  }
  const float* bp = g.b + j;
  for (int64_t p = 0; p < g.k; ++p, bp += g.ldb) {
    const __m512 b0 = _mm512_maskz_loadu_ps(m0, bp);
    const __m512 b1 = _mm512_maskz_loadu_ps(m1, bp + 16);
    const float* ap = kTrans ? g.a + p * g.lda + i : g.a + i * g.lda + p;
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m512 av = _mm512_set1_ps(kTrans ? ap[r] : ap[r * g.lda]);
      c0[r] = _mm512_fmadd_ps(av, b0, c0[r]);
      c1[r] = _mm512_fmadd_ps(av, b1, c1[r]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    _mm512_mask_storeu_ps(cp + r * g.ldc, m0, c0[r]);
    _mm512_mask_storeu_ps(cp + r * g.ldc + 16, m1, c1[r]);
  }
}

template <bool kTrans, int MR = kMr>
void gemm_rows(const Gemm<float>& g, int64_t i, int64_t j, __mmask16 m0, __mmask16 m1) {
  if constexpr (MR > 0) {
    if (g.m - i >= MR) {
      for (; i + MR <= g.m; i += MR) gemm_block<MR, kTrans>(g, i, j, m0, m1);
      if (MR == kMr) return gemm_rows<kTrans, MR - 1>(g, i, j, m0, m1);
      return;
    }
    gemm_rows<kTrans, MR - 1>(g, i, j, m0, m1);
  }
}

template <bool kTrans>
void gemm_cols(const Gemm<float>& g) {
  for (int64_t j = 0; j < g.n; j += 32) {
    const int64_t rest = g.n - j;
    gemm_rows<kTrans>(g, 0, j, tail_mask16(rest), tail_mask16(rest > 16 ? rest - 16 : 0));
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
  // exp(s − m) in place and its sum; the tail goes through the same vector exp (masked).
  static float exp_shift(float* s, int64_t n, float m) { return Avx512Ops::exp_shift(s, n, m); }
  static float max(const float* s, int64_t n) {
    __m512 v = _mm512_set1_ps(s[0]);
    for (int64_t j = 0; j < n; j += 16)  // masked-off lanes keep v's value: max is idempotent
      v = _mm512_mask_max_ps(v, tail_mask16(n - j), v, _mm512_maskz_loadu_ps(tail_mask16(n - j), s + j));
    return hmax16(v);
  }
  // Element-wise the same operations as the portable loops, so results are bit-identical.
  static void scale_to(float* dst, const float* src, float c, int64_t n) {
    const __m512 vc = _mm512_set1_ps(c);
    for (int64_t i = 0; i < n; i += 16) {
      const __mmask16 k = tail_mask16(n - i);
      _mm512_mask_storeu_ps(dst + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, src + i), vc));
    }
  }
  static void ds_row(float* ds, const float* p, float dr, int64_t n) {
    const __m512 vd = _mm512_set1_ps(dr);
    for (int64_t j = 0; j < n; j += 16) {
      const __mmask16 k = tail_mask16(n - j);
      _mm512_mask_storeu_ps(ds + j, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, p + j),
                                                     _mm512_sub_ps(_mm512_maskz_loadu_ps(k, ds + j), vd)));
    }
  }
  // xt[d·ldt + t] = x[t·ldx + d]: 16 tokens of one column per gather, scalar edges. O(T·D) per
  // call against the O(T²·D) of the tiles, so a gather is fast enough.
  static void transpose(const float* x, int64_t ldx, int64_t rows, int64_t cols, float* xt,
                        int64_t ldt) {
    const __m512i idx = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32(static_cast<int>(ldx)));
    int64_t t = 0;
    if (ldx * 16 < (int64_t{1} << 31))
      for (; t + 16 <= rows; t += 16)
        for (int64_t d = 0; d < cols; ++d)
          _mm512_storeu_ps(xt + d * ldt + t,
                           _mm512_mask_i32gather_ps(_mm512_setzero_ps(), kAll16, idx, x + t * ldx + d, 4));
    for (; t < rows; ++t)
      for (int64_t d = 0; d < cols; ++d) xt[d * ldt + t] = x[t * ldx + d];
  }
};

}  // namespace

void causal_attention_f32(const ops::CausalAttentionArgs& a) {
  causal_attention_run<float, TrainOps>(a);
}

void causal_attention_backward_f32(const ops::CausalAttentionBackwardArgs& a) {
  causal_attention_backward_run<float, TrainOps>(a);
}

}  // namespace unillm::cpu::avx512
