// AVX2/FMA instantiation of the training attention loops (attention_train_*.h) for f32: a
// register-blocked 6×16 GEMM micro-kernel for the tile products and the vectorised exp.
#include "backends/cpu/attention_avx2_ops.h"
#include "backends/cpu/attention_train_backward.h"

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
  static float exp_shift(float* s, int64_t n, float m) { return Avx2Ops::exp_shift(s, n, m); }
};

}  // namespace

void causal_attention_f32(const ops::CausalAttentionArgs& a) {
  causal_attention_run<float, TrainOps>(a);
}

void causal_attention_backward_f32(const ops::CausalAttentionBackwardArgs& a) {
  causal_attention_backward_run<float, TrainOps>(a);
}

}  // namespace unillm::cpu::avx2
