// FlashAttention-2 style backward of causal_attention, shared by the portable and AVX2 kernels:
// P is recomputed tile by tile from scale·q, k and the saved lse; D = rowsum(dO ∘ O);
// dS = P ∘ (dO·Vᵀ − D). Pass 1 owns (b, kv head, key tile) and sums dV += Pᵀ·dO and
// dK += dSᵀ·(scale·q) over all query heads of the kv head; pass 2 owns (b, kv head, query tile)
// and sums dQ = scale · dS·K. No element has two writers, so no atomics and no reduction order
// that depends on the thread count.
#pragma once

#include "backends/cpu/attention_train_tile.h"

namespace unillm::cpu {

// Grouped dO, lse and D = rowsum(dO ∘ O) in the [B, Hkv, T·G] order of the query blocks.
template <typename F, typename V>
void backward_layout(const ops::CausalAttentionBackwardArgs& a, TrainLayout<F, V>& L) {
  const int64_t T = L.T, H = L.H, D = L.D, G = L.G;
  L.dog.resize(L.B * T * H * D);
  L.lse.resize(L.B * T * H);
  L.dsum.resize(L.B * T * H);
  const F* go = static_cast<const F*>(a.grad_out);
  const F* o = static_cast<const F*>(a.out);
  const F* lse = static_cast<const F*>(a.lse);
  parallel_for(L.B * T, L.threads > 1 ? 16 : L.B * T, [&](int64_t lo, int64_t hi) {
    for (int64_t bt = lo; bt < hi; ++bt) {
      const int64_t b = bt / T, t = bt % T;
      for (int64_t h = 0; h < H; ++h) {
        const int64_t row = bt * H + h, gi = ((b * L.Hkv + h / G) * T + t) * G + h % G;
        F s = 0;
        for (int64_t i = 0; i < D; ++i) s += go[row * D + i] * o[row * D + i];
        std::memcpy(L.dog.data() + gi * D, go + row * D, D * sizeof(F));
        L.lse[gi] = lse[row];
        L.dsum[gi] = s;
      }
    }
  });
}

// Query rows t0 .. t0 + n - 1 against keys j0 .. j0 + nk - 1: w.s = P, and (when want_ds)
// w.dp = dS = P ∘ (dO·Vᵀ − D). Both [n·G, nk] with row stride kTrainKeys.
template <typename F, typename V>
void backward_scores(const TrainLayout<F, V>& L, const TrainTile& q_rows, int64_t j0, int64_t nk,
                     bool want_ds, TrainScratch<F, V>& w) {
  const int64_t b = q_rows.b, t0 = q_rows.r0, R = q_rows.n * L.G, D = L.D, T = L.T;
  const int64_t bg = L.bg(b, q_rows.g), v0 = (bg * T + t0) * L.G;  // first grouped vector
  V::gemm(Gemm<F>{w.s.data(), L.qs.data() + v0 * D, L.kt_at(bg, j0), R, nk, D, D, L.ldt, kTrainKeys,
                  false, false});
  if (want_ds)
    V::gemm(Gemm<F>{w.dp.data(), L.dog.data() + v0 * D, L.vt_at(bg, j0), R, nk, D, D, L.ldt,
                    kTrainKeys, false, false});
  for (int64_t r = 0; r < R; ++r) {
    F* p = w.s.data() + r * kTrainKeys;
    probs_row<F, V>(L, b, j0, nk, t0 + r / L.G, L.lse[v0 + r], p);
    if (!want_ds) continue;
    F* ds = w.dp.data() + r * kTrainKeys;
    const F dr = L.dsum[v0 + r];
    for (int64_t j = 0; j < nk; ++j) ds[j] = p[j] * (ds[j] - dr);
  }
}

// Pass 1: tl = keys j0 .. j0 + n - 1 of (b, kv head g).
template <typename F, typename V>
void dkdv_tile(const ops::CausalAttentionBackwardArgs& a, const TrainLayout<F, V>& L,
               const TrainTile& tl, TrainScratch<F, V>& w) {
  const int64_t T = L.T, D = L.D, G = L.G, j0 = tl.r0, nk = tl.n;
  const bool need_dk = a.grad_k != nullptr, need_dv = a.grad_v != nullptr;
  F *dk = w.acc.data(), *dv = w.acc2.data();
  std::fill(dk, dk + nk * D, F(0));
  std::fill(dv, dv + nk * D, F(0));
  int64_t t_hi = j0 + nk - 1;  // last query row that sees a key of the tile
  for (int64_t j = j0; j < j0 + nk; ++j) t_hi = std::max<int64_t>(t_hi, L.idx.last[tl.b * T + j]);
  for (int64_t t0 = j0; t0 <= t_hi; t0 += L.tq) {
    const TrainTile rows{tl.b, tl.g, static_cast<int32_t>(t0),
                         static_cast<int32_t>(std::min(L.tq, t_hi + 1 - t0))};
    const int64_t R = rows.n * G, v0 = (L.bg(tl.b, tl.g) * T + t0) * G;
    backward_scores<F, V>(L, rows, j0, nk, need_dk, w);
    if (need_dv)
      V::gemm(
          Gemm<F>{dv, w.s.data(), L.dog.data() + v0 * D, nk, D, R, kTrainKeys, D, D, true, true});
    if (need_dk)
      V::gemm(
          Gemm<F>{dk, w.dp.data(), L.qs.data() + v0 * D, nk, D, R, kTrainKeys, D, D, true, true});
  }
  for (int64_t j = 0; j < nk; ++j) {
    const int64_t off = ((tl.b * T + j0 + j) * L.Hkv + tl.g) * D;
    if (need_dk) std::memcpy(static_cast<F*>(a.grad_k) + off, dk + j * D, D * sizeof(F));
    if (need_dv) std::memcpy(static_cast<F*>(a.grad_v) + off, dv + j * D, D * sizeof(F));
  }
}

// Pass 2: tl = query rows t0 .. t0 + n - 1 of (b, kv head g), all G heads.
template <typename F, typename V>
void dq_tile(const ops::CausalAttentionBackwardArgs& a, const TrainLayout<F, V>& L,
             const TrainTile& tl, TrainScratch<F, V>& w) {
  const int64_t T = L.T, D = L.D, G = L.G, R = tl.n * G;
  F* dq = w.acc.data();
  std::fill(dq, dq + R * D, F(0));
  const F* k = static_cast<const F*>(a.k) + (tl.b * T * L.Hkv + tl.g) * D;
  const int64_t lo = first_key<F, V>(L, tl.b, tl.r0, tl.n), hi = tl.r0 + tl.n - 1;
  for (int64_t j0 = lo; j0 <= hi; j0 += kTrainKeys) {
    const int64_t nk = std::min(kTrainKeys, hi + 1 - j0);
    backward_scores<F, V>(L, tl, j0, nk, true, w);
    V::gemm(Gemm<F>{dq, w.dp.data(), k + j0 * L.Hkv * D, R, D, nk, kTrainKeys, L.Hkv * D, D, false,
                    true});
  }
  F* out = static_cast<F*>(a.grad_q);
  for (int64_t r = 0; r < R; ++r) {
    const int64_t t = tl.r0 + r / G, h = tl.g * G + r % G;
    F* dst = out + ((tl.b * T + t) * L.H + h) * D;
    for (int64_t i = 0; i < D; ++i) dst[i] = dq[r * D + i] * F(a.scale);
  }
}

template <typename F, typename V>
void causal_attention_backward_run(const ops::CausalAttentionBackwardArgs& a) {
  TrainLayout<F, V> L(a);
  train_layout<F, V>(static_cast<const F*>(a.q), static_cast<const F*>(a.k),
                     static_cast<const F*>(a.v), L, a.scale);
  backward_layout<F, V>(a, L);
  if (a.grad_k || a.grad_v)
    run_tiles<F, V>(
        L, train_tiles(L.B, L.Hkv, L.T, kTrainKeys),
        [&](const TrainTile& tl, TrainScratch<F, V>& w) { dkdv_tile<F, V>(a, L, tl, w); });
  if (a.grad_q)
    run_tiles<F, V>(
        L, train_tiles(L.B, L.Hkv, L.T, L.tq),
        [&](const TrainTile& tl, TrainScratch<F, V>& w) { dq_tile<F, V>(a, L, tl, w); });
}

}  // namespace unillm::cpu
