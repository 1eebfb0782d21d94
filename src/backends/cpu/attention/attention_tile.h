// The flash-style paged attention loop shared by the portable and AVX2 kernels. A tile is (sequence,
// kv head, a few query rows); its R = rows · G query vectors (all G query heads of the kv head) walk
// the sequence's KV blocks once through the block table, keeping a running max m, sum l and an
// unnormalised accumulator per vector (online softmax). The vector-ops policy V (dot, axpy, scale,
// exp_shift) is kernels/paged_attention.cpp's ScalarOps or attention_avx2_ops.h's Avx2Ops, so each
// kernel file gets its own instantiation compiled with its own flags.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/parallel.h"
#include "ops/attention.h"

namespace unillm::cpu {

struct AttnTile {
  int32_t seq, kv_head, row0, rows;
};

// Tiles of every sequence (rows_per_tile query rows each), in (sequence, kv head, rows) order
// (defined in kernels/paged_attention.cpp).
std::vector<AttnTile> attention_tiles(const ops::AttentionArgs& a, int64_t rows_per_tile);

template <typename T>
struct AttnScratch {
  std::vector<T> acc, m, l, scores;  // [R, D], [R], [R], [R, BS]
};

template <typename T, typename V>
void attention_tile(const ops::AttentionArgs& a, const AttnTile& tl, AttnScratch<T>& w) {
  const int64_t G = a.heads / a.kv_heads, D = a.head_dim, BS = a.block_size, R = tl.rows * G;
  const int64_t q_len = a.q_start[tl.seq + 1] - a.q_start[tl.seq];
  const int64_t row_base = a.q_start[tl.seq] + tl.row0;
  const int64_t first_pos = a.kv_len[tl.seq] - q_len + tl.row0, last_pos = first_pos + tl.rows - 1;
  const int64_t slot = a.kv_heads * D;  // stride between token slots in a block
  const int32_t* bt = a.block_table + tl.seq * a.max_blocks;
  const T* q = static_cast<const T*>(a.q);
  T *acc = w.acc.data(), *m = w.m.data(), *l = w.l.data(), *sc = w.scores.data();
  std::fill(acc, acc + R * D, T(0));
  std::fill(m, m + R, -std::numeric_limits<T>::infinity());
  std::fill(l, l + R, T(0));
  auto q_off = [&](int64_t v) { return ((row_base + v / G) * a.heads + tl.kv_head * G + v % G) * D; };
  for (int64_t b = 0; b * BS <= last_pos; ++b) {
    const int64_t t0 = b * BS, tn = std::min(BS, last_pos + 1 - t0);
    const int64_t base = (int64_t{bt[b]} * BS * a.kv_heads + tl.kv_head) * D;
    const T* kb = static_cast<const T*>(a.k_cache) + base;
    const T* vb = static_cast<const T*>(a.v_cache) + base;
    for (int64_t v = 0; v < R; ++v) {  // scores and online-softmax update
      const int64_t nv = std::min(tn, first_pos + v / G - t0 + 1);
      if (nv <= 0) continue;
      const T* qv = q + q_off(v);
      T* s = sc + v * BS;
      T mb = -std::numeric_limits<T>::infinity();
      for (int64_t t = 0; t < nv; ++t) mb = std::max(mb, s[t] = V::dot(qv, kb + t * slot, D) * T(a.scale));
      const T mn = std::max(m[v], mb), corr = std::exp(m[v] - mn);
      l[v] = l[v] * corr + V::exp_shift(s, nv, mn);
      if (corr != T(1)) V::scale(acc + v * D, corr, D);
      m[v] = mn;
    }
    for (int64_t t = 0; t < tn; ++t)  // P · V, each V row read once for all R vectors
      for (int64_t v = 0; v < R; ++v)
        if (t0 + t <= first_pos + v / G) V::axpy(acc + v * D, sc[v * BS + t], vb + t * slot, D);
  }
  T* out = static_cast<T*>(a.out);
  for (int64_t v = 0; v < R; ++v) {
    const T inv = l[v] > T(0) ? T(1) / l[v] : T(0);
    for (int64_t i = 0; i < D; ++i) out[q_off(v) + i] = acc[v * D + i] * inv;
  }
}

// Runs all tiles: thread c takes tiles c, c + nt, c + 2·nt, ... (static, and balanced for causal
// prefill where later tiles cost more).
template <typename T, typename V>
void attention_run(const ops::AttentionArgs& a) {
  const int64_t G = a.heads / a.kv_heads;
  const int64_t rows_per_tile = std::max<int64_t>(1, 8 / G);
  const std::vector<AttnTile> tiles = attention_tiles(a, rows_per_tile);
  const int64_t n = static_cast<int64_t>(tiles.size());
  const int64_t nt = std::max<int64_t>(1, std::min<int64_t>(num_threads(), n));
  parallel_for(nt, 1, [&](int64_t lo, int64_t hi) {
    const int64_t R = rows_per_tile * G;
    AttnScratch<T> w{std::vector<T>(R * a.head_dim), std::vector<T>(R), std::vector<T>(R),
                     std::vector<T>(R * a.block_size)};
    for (int64_t c = lo; c < hi; ++c)
      for (int64_t i = c; i < n; i += nt) attention_tile<T, V>(a, tiles[i], w);
  });
}

}  // namespace unillm::cpu
