// The flash-style training attention loops (causal_attention) shared by the portable and AVX2
// kernels. Each (batch, kv head) works on grouped operands: the G query heads of a kv head and a
// run of tokens form one row-major [rows·G, D] block, and K/V are also held transposed [D, T], so
// every step is a small GEMM (policy V::gemm) plus row-wise exp (V::exp_shift).
//   forward:  per query tile, key blocks with an online softmax; writes out and lse.
//   backward: pass 1 per (b, kv head, key tile) accumulates dK, dV over its query rows;
//             pass 2 per (b, kv head, query tile) accumulates dQ. Every output element has one
//             owner and a fixed summation order, so results do not depend on the thread count.
// V is defined in each .cpp's anonymous namespace, so each file gets its own instantiation.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backends/cpu/scratch.h"
#include "core/parallel.h"
#include "ops/causal_attention.h"

namespace unillm::cpu {

// C[m, n] = (or +=) A[m, k] · B[k, n], row-major; A(i, p) = a[i·lda + p], or a[p·lda + i] when
// a_trans (so Pᵀ·dO reads P as stored).
template <typename F>
struct Gemm {
  F* c;
  const F* a;
  const F* b;
  int64_t m, n, k, lda, ldb, ldc;
  bool a_trans, accumulate;
};

// Per token (index b·T + t): the first and last token with its segment id, and the start of the
// contiguous run of equal ids that ends at it. Without segment ids: 0, T - 1 and 0.
struct SegmentIndex {
  std::vector<int32_t> first, last, run_lo;
};
// (segment_index and train_tiles are defined in kernels/causal_attention.cpp.)
SegmentIndex segment_index(const int32_t* seg, int64_t batch, int64_t tokens);

// A unit of work: batch b, kv head g, tokens r0 .. r0 + n - 1 (query rows or keys).
struct TrainTile {
  int32_t b, g, r0, n;
};
std::vector<TrainTile> train_tiles(int64_t batch, int64_t kv_heads, int64_t tokens, int64_t step);

constexpr int64_t kTrainQVecs =
    48;  // query vectors (rows · G) per tile (divisible by G = 1..4, 6, 8)
constexpr int64_t kTrainKeys = 64;                         // keys per block
constexpr int64_t kTrainWorkPerThread = int64_t{1} << 18;  // B·H·T²·D per thread, at least

// Shapes and the grouped/transposed operands of one call. (V, like every template parameter V
// here, keeps the portable and AVX2 files' instantiations apart: they are compiled with different
// instruction sets and must not be merged by the linker.)
template <typename F, typename V>
struct TrainLayout {
  int64_t B, T, H, Hkv, D, G, tq;  // tq: query rows per tile
  const int32_t* seg;
  int64_t threads;  // small problems run on fewer threads (a parallel region costs more)
  int64_t ldt;      // row stride of kᵀ/vᵀ: T padded so that rows do not alias in the L1 cache
  SegmentIndex idx;
  // From the CPU allocator, not std::vector: a vector's fresh (zero-filled) heap blocks of a few
  // MiB each call cost more page faults than the attention kernels' own work on small models.
  ScratchBuffer<F> qs, kt, vt;      // scale·q [B, Hkv, T·G, D]; kᵀ, vᵀ [B, Hkv, D, ldt]
  ScratchBuffer<F> dog, lse, dsum;  // dO [B, Hkv, T·G, D]; lse, rowsum(dO∘O) [B, Hkv, T·G]

  template <typename Args>  // CausalAttentionArgs or CausalAttentionBackwardArgs
  explicit TrainLayout(const Args& a)
      : B(a.batch),
        T(a.tokens),
        H(a.heads),
        Hkv(a.kv_heads),
        D(a.head_dim),
        G(H / Hkv),
        tq(std::max<int64_t>(1, kTrainQVecs / G)),
        seg(a.segment_ids),
        threads(std::clamp<int64_t>(B * H * T * T * D / kTrainWorkPerThread, 1, num_threads())),
        ldt((T + 15) / 16 * 16 + 16) {}

  int64_t bg(int64_t b, int64_t g) const { return b * Hkv + g; }
  const F* q_rows(int64_t b, int64_t g, int64_t t) const {
    return qs.data() + (bg(b, g) * T + t) * G * D;
  }
  // kᵀ/vᵀ of (b, g) from key j0 on: a [D, ·] block with row stride ldt.
  const F* kt_at(int64_t bg, int64_t j0) const { return kt.data() + bg * D * ldt + j0; }
  const F* vt_at(int64_t bg, int64_t j0) const { return vt.data() + bg * D * ldt + j0; }
  // Row t may see key j.
  bool allowed(int64_t b, int64_t j, int64_t t) const {
    return j <= t && (!seg || seg[b * T + j] == seg[b * T + t]);
  }
  // Row t sees every key of [j0, j0 + n).
  bool sees_all(int64_t b, int64_t j0, int64_t n, int64_t t) const {
    return j0 >= idx.run_lo[b * T + t] && j0 + n - 1 <= t;
  }
};

template <typename F, typename V>
void transpose_tokens(const F* x, int64_t b, int64_t g, const TrainLayout<F, V>& L, F* xt) {
  const int64_t T = L.T, D = L.D;
  V::transpose(x + (b * T * L.Hkv + g) * D, L.Hkv * D, T, D, xt, L.ldt);
  for (int64_t d = 0; d < D; ++d) std::fill(xt + d * L.ldt + T, xt + (d + 1) * L.ldt, F(0));
}

// Fills the layout: sizes, segment index, scale·q grouped by kv head, kᵀ and (for backward) vᵀ.
template <typename F, typename V>
void train_layout(const F* q, const F* k, const F* v, TrainLayout<F, V>& L, float scale) {
  const int64_t B = L.B, T = L.T, Hkv = L.Hkv, D = L.D, G = L.G;
  L.idx = segment_index(L.seg, B, T);
  L.qs.resize(B * T * L.H * D);
  L.kt.resize(B * Hkv * D * L.ldt);
  if (v) L.vt.resize(L.kt.size());
  parallel_for(B * Hkv, L.threads > 1 ? 1 : B * Hkv, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const int64_t b = i / Hkv, g = i % Hkv;
      for (int64_t t = 0; t < T; ++t)
        V::scale_to(L.qs.data() + ((b * Hkv + g) * T + t) * G * D,
                    q + ((b * T + t) * L.H + g * G) * D, F(scale), G * D);
      transpose_tokens<F, V>(k, b, g, L, L.kt.data() + i * D * L.ldt);
      if (v) transpose_tokens<F, V>(v, b, g, L, L.vt.data() + i * D * L.ldt);
    }
  });
}

// Masks one score row (keys j0 .. j0 + n - 1, query row t): -inf where not allowed. Returns
// false when nothing is allowed.
template <typename F, typename V>
bool mask_row(const TrainLayout<F, V>& L, int64_t b, int64_t j0, int64_t n, int64_t t, F* s) {
  bool any = false;
  for (int64_t j = 0; j < n; ++j) {
    if (L.allowed(b, j0 + j, t))
      any = true;
    else
      s[j] = -std::numeric_limits<F>::infinity();
  }
  return any;
}

// Zeroes the masked entries of a row of probabilities (exp of -inf may be a tiny approximation)
// and returns the row's sum.
template <typename F, typename V>
F zero_masked(const TrainLayout<F, V>& L, int64_t b, int64_t j0, int64_t n, int64_t t, F* s) {
  F sum = 0;
  for (int64_t j = 0; j < n; ++j) sum += (s[j] = L.allowed(b, j0 + j, t) ? s[j] : F(0));
  return sum;
}

// p = exp(s − lse) in place, 0 where masked (the backward's recompute of one row, with the same
// exp as the forward).
template <typename F, typename V>
void probs_row(const TrainLayout<F, V>& L, int64_t b, int64_t j0, int64_t n, int64_t t, F lse,
               F* s) {
  const bool all = L.sees_all(b, j0, n, t);
  if (!all && !mask_row<F, V>(L, b, j0, n, t, s)) {
    std::fill(s, s + n, F(0));
    return;
  }
  V::exp_shift(s, n, lse);
  if (!all) zero_masked<F, V>(L, b, j0, n, t, s);
}

// First key that query rows t0 .. t0 + n - 1 can see.
template <typename F, typename V>
int64_t first_key(const TrainLayout<F, V>& L, int64_t b, int64_t t0, int64_t n) {
  int64_t lo = t0;
  for (int64_t t = t0; t < t0 + n; ++t) lo = std::min<int64_t>(lo, L.idx.first[b * L.T + t]);
  return lo;
}

template <typename F, typename V>
struct TrainScratch {
  std::vector<F> s, dp, acc, acc2, m, l;
  std::vector<F> dq;  // the fused backward's dQ of one (b, kv head): [T·G, D], sized on first use
  explicit TrainScratch(int64_t r, int64_t d)
      : s(r * kTrainKeys),
        dp(r * kTrainKeys),
        acc(std::max(r, kTrainKeys) * d),
        acc2(kTrainKeys * d),
        m(r),
        l(r) {}
};

// Online-softmax update of rows' running max/sum for one key block; s becomes probabilities
// relative to the new max, and acc rows are rescaled.
template <typename F, typename V>
void softmax_block(const TrainLayout<F, V>& L, const TrainTile& tl, int64_t j0, int64_t n,
                   TrainScratch<F, V>& w) {
  const int64_t R = tl.n * L.G, D = L.D;
  for (int64_t r = 0; r < R; ++r) {
    const int64_t t = tl.r0 + r / L.G;
    F* s = w.s.data() + r * kTrainKeys;
    const bool all = L.sees_all(tl.b, j0, n, t);
    if (!all && !mask_row<F, V>(L, tl.b, j0, n, t, s)) {
      std::fill(s, s + n, F(0));
      continue;
    }
    const F mb = V::max(s, n);
    const F mo = w.m[r], mn = std::max(mo, mb);
    const F corr = mo == -std::numeric_limits<F>::infinity() ? F(0) : std::exp(mo - mn);
    F sum = V::exp_shift(s, n, mn);
    if (!all) sum = zero_masked<F, V>(L, tl.b, j0, n, t, s);
    w.l[r] = w.l[r] * corr + sum;
    w.m[r] = mn;
    if (corr != F(1)) V::scale_to(w.acc.data() + r * D, w.acc.data() + r * D, corr, D);
  }
}

template <typename F, typename V>
void forward_tile(const ops::CausalAttentionArgs& a, const TrainLayout<F, V>& L,
                  const TrainTile& tl, TrainScratch<F, V>& w) {
  const int64_t R = tl.n * L.G, D = L.D, T = L.T, bg = L.bg(tl.b, tl.g);
  std::fill(w.acc.begin(), w.acc.begin() + R * D, F(0));
  std::fill(w.m.begin(), w.m.begin() + R, -std::numeric_limits<F>::infinity());
  std::fill(w.l.begin(), w.l.begin() + R, F(0));
  const F* q = L.q_rows(tl.b, tl.g, tl.r0);
  const F* vv = static_cast<const F*>(a.v) + (tl.b * T * L.Hkv + tl.g) * D;
  const int64_t lo = first_key<F, V>(L, tl.b, tl.r0, tl.n), hi = tl.r0 + tl.n - 1;
  for (int64_t j0 = lo; j0 <= hi; j0 += kTrainKeys) {
    const int64_t n = std::min(kTrainKeys, hi + 1 - j0);
    V::gemm(Gemm<F>{w.s.data(), q, L.kt_at(bg, j0), R, n, D, D, L.ldt, kTrainKeys, false, false});
    softmax_block<F, V>(L, tl, j0, n, w);
    V::gemm(Gemm<F>{w.acc.data(), w.s.data(), vv + j0 * L.Hkv * D, R, D, n, kTrainKeys, L.Hkv * D,
                    D, false, true});
  }
  F* out = static_cast<F*>(a.out);
  F* lse = static_cast<F*>(a.lse);
  for (int64_t r = 0; r < R; ++r) {
    const int64_t t = tl.r0 + r / L.G, h = tl.g * L.G + r % L.G, row = (tl.b * T + t) * L.H + h;
    const F inv = F(1) / w.l[r];  // every row sees itself, so l > 0
    V::scale_to(out + row * D, w.acc.data() + r * D, inv, D);
    lse[row] = w.m[r] + std::log(w.l[r]);
  }
}

// Thread c runs tiles c, c + nt, ... (static; interleaving balances the causal triangle).
template <typename F, typename V, typename Fn>
void run_tiles(const TrainLayout<F, V>& L, const std::vector<TrainTile>& tiles, Fn&& fn) {
  const int64_t n = static_cast<int64_t>(tiles.size());
  const int64_t nt = std::max<int64_t>(1, std::min<int64_t>(L.threads, n));
  parallel_for(nt, 1, [&](int64_t lo, int64_t hi) {
    TrainScratch<F, V> w(L.tq * L.G, L.D);
    for (int64_t c = lo; c < hi; ++c)
      for (int64_t i = c; i < n; i += nt) fn(tiles[i], w);
  });
}

template <typename F, typename V>
void causal_attention_run(const ops::CausalAttentionArgs& a) {
  TrainLayout<F, V> L(a);
  train_layout<F, V>(static_cast<const F*>(a.q), static_cast<const F*>(a.k), nullptr, L, a.scale);
  run_tiles<F, V>(
      L, train_tiles(L.B, L.Hkv, L.T, L.tq),
      [&](const TrainTile& tl, TrainScratch<F, V>& w) { forward_tile<F, V>(a, L, tl, w); });
}

}  // namespace unillm::cpu
