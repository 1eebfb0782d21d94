// FlashAttention-2 style backward of causal_attention, shared by the portable and AVX2 kernels:
// P is recomputed tile by tile from scale·q, k and the saved lse; D = rowsum(dO ∘ O);
// dS = P ∘ (dO·Vᵀ − D). Two schedules with the same arithmetic:
// - fused, when there are enough (b, kv head) pairs for the threads: a task owns one pair, walks
//   its key tiles, and from each (query tile, key tile) block's P and dS sums dV += Pᵀ·dO,
//   dK += dSᵀ·(scale·q) and dQ += dS·K (dQ in a task-private [T·G, D] buffer) — P and dS once;
// - two passes otherwise: pass 1 owns (b, kv head, key tile) and sums dV and dK; pass 2 owns
//   (b, kv head, query tile) and recomputes P and dS for dQ = scale · dS·K.
// Each dQ element sums its keys in ascending order in both (a masked block adds exact zeros), so
// the two agree bit for bit; no element has two writers, so no atomics and no reduction order
// that depends on the thread count.
#pragma once

#include "backends/cpu/attention/attention_train_tile.h"

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
    V::ds_row(w.dp.data() + r * kTrainKeys, p, L.dsum[v0 + r], nk);
  }
}

// Writes dQ = scale · acc for the R = n·G grouped query vectors from token t0 of (b, kv head g).
template <typename F, typename V>
void store_dq(const ops::CausalAttentionBackwardArgs& a, const TrainLayout<F, V>& L, int64_t b,
              int64_t g, int64_t t0, int64_t R, const F* acc) {
  F* out = static_cast<F*>(a.grad_q);
  for (int64_t r = 0; r < R; ++r) {
    const int64_t t = t0 + r / L.G, h = g * L.G + r % L.G;
    V::scale_to(out + ((b * L.T + t) * L.H + h) * L.D, acc + r * L.D, F(a.scale), L.D);
  }
}

// Pass 1, and the fused schedule's step: tl = keys j0 .. j0 + n - 1 of (b, kv head g); writes
// their dK and dV. dq (fused only): the (b, g) task's [T·G, D] dQ sum, to which the blocks'
// dS·K are added.
template <typename F, typename V>
void dkdv_tile(const ops::CausalAttentionBackwardArgs& a, const TrainLayout<F, V>& L,
               const TrainTile& tl, TrainScratch<F, V>& w, F* dq = nullptr) {
  const int64_t T = L.T, D = L.D, G = L.G, j0 = tl.r0, nk = tl.n;
  const bool need_dk = a.grad_k != nullptr, need_dv = a.grad_v != nullptr;
  const F* k = static_cast<const F*>(a.k) + (tl.b * T * L.Hkv + tl.g) * D;
  F *dk = w.acc.data(), *dv = w.acc2.data();
  std::fill(dk, dk + nk * D, F(0));
  std::fill(dv, dv + nk * D, F(0));
  int64_t t_hi = j0 + nk - 1;  // last query row that sees a key of the tile
  for (int64_t j = j0; j < j0 + nk; ++j) t_hi = std::max<int64_t>(t_hi, L.idx.last[tl.b * T + j]);
  for (int64_t t0 = j0; t0 <= t_hi; t0 += L.tq) {
    const TrainTile rows{tl.b, tl.g, static_cast<int32_t>(t0),
                         static_cast<int32_t>(std::min(L.tq, t_hi + 1 - t0))};
    const int64_t R = rows.n * G, v0 = (L.bg(tl.b, tl.g) * T + t0) * G;
    backward_scores<F, V>(L, rows, j0, nk, need_dk || dq, w);
    if (need_dv)
      V::gemm(
          Gemm<F>{dv, w.s.data(), L.dog.data() + v0 * D, nk, D, R, kTrainKeys, D, D, true, true});
    if (need_dk)
      V::gemm(
          Gemm<F>{dk, w.dp.data(), L.qs.data() + v0 * D, nk, D, R, kTrainKeys, D, D, true, true});
    if (dq)
      V::gemm(Gemm<F>{dq + t0 * G * D, w.dp.data(), k + j0 * L.Hkv * D, R, D, nk, kTrainKeys,
                      L.Hkv * D, D, false, true});
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
  const int64_t T = L.T, D = L.D, R = tl.n * L.G;
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
  store_dq<F, V>(a, L, tl.b, tl.g, tl.r0, R, dq);
}

// The fused schedule: tl = all T tokens of (b, kv head g), key tile by key tile.
template <typename F, typename V>
void fused_tile(const ops::CausalAttentionBackwardArgs& a, const TrainLayout<F, V>& L,
                const TrainTile& tl, TrainScratch<F, V>& w) {
  F* dq = nullptr;
  if (a.grad_q) {
    w.dq.assign(static_cast<size_t>(L.T * L.G * L.D), F(0));
    dq = w.dq.data();
  }
  for (int64_t j0 = 0; j0 < L.T; j0 += kTrainKeys) {
    const TrainTile keys{tl.b, tl.g, static_cast<int32_t>(j0),
                         static_cast<int32_t>(std::min(kTrainKeys, L.T - j0))};
    dkdv_tile<F, V>(a, L, keys, w, dq);
  }
  if (dq) store_dq<F, V>(a, L, tl.b, tl.g, 0, L.T * L.G, dq);
}

template <typename F, typename V>
void causal_attention_backward_run(const ops::CausalAttentionBackwardArgs& a) {
  TrainLayout<F, V> L(a);
  train_layout<F, V>(static_cast<const F*>(a.q), static_cast<const F*>(a.k),
                     static_cast<const F*>(a.v), L, a.scale);
  backward_layout<F, V>(a, L);
  // Whole (b, kv head) tasks balance well enough from four per thread on; each thread's dQ sum
  // [T·G, D] stays within 16 MiB (the memory plan counts it; longer rows take two passes).
  const bool small_dq = L.T * L.G * L.D * static_cast<int64_t>(sizeof(F)) <= (int64_t{16} << 20);
  if (L.B * L.Hkv >= 4 * L.threads && small_dq) {
    run_tiles<F, V>(
        L, train_tiles(L.B, L.Hkv, L.T, L.T),
        [&](const TrainTile& tl, TrainScratch<F, V>& w) { fused_tile<F, V>(a, L, tl, w); });
    return;
  }
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
