// The flash-style paged attention loop shared by the portable and AVX2 kernels. A tile is (sequence,
// kv head, a few query rows); its R = rows · G query vectors (all G query heads of the kv head) walk
// the sequence's KV blocks once through the block table, keeping a running max m, sum l and an
// unnormalised accumulator per vector (online softmax). The vector-ops policy V (dot, axpy, scale,
// exp_shift, and optionally the many-row dots / axpy_rows) is kernels/paged_attention.cpp's
// ScalarOps, attention_avx2_ops.h's Avx2Ops or attention_avx512_ops.h's Avx512Ops, so each
// kernel file gets its own instantiation compiled with its own flags.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backends/cpu/attention/kv_cache_types.h"
#include "core/dtype.h"
#include "core/parallel.h"
#include "ops/attention.h"

namespace unillm::cpu {


struct AttnTile {
  int32_t seq, kv_head, row0, rows;
  int32_t kv_heads = 1;  // kv heads kv_head .. kv_head + kv_heads - 1
};

// Tiles of every sequence (rows_per_tile query rows each), in (sequence, kv heads, rows) order
// (defined in kernels/paged_attention.cpp). A token slot holds every head's key side by side, so
// a tile that takes several adjacent kv heads reads the cache in longer forward runs instead of
// one kilobytes-strided row per key and head. With at least two sequences per thread a tile
// takes all kv heads of its rows (the decode of many sequences reads as much KV as weights);
// fewer sequences split each sequence's heads into about one run per thread, so that every
// thread has work (one sequence at a 300-token context: 160 -> 250 tok/s int8 decode of
// stories110M, where one head per tile read the cache at a sixth of the weights' bandwidth).
// Each query vector's arithmetic is the same either way.
std::vector<AttnTile> attention_tiles(const ops::AttentionArgs& a, int64_t rows_per_tile);

template <typename T>
struct AttnScratch {
  std::vector<T> acc, m, l, scores;  // [R, D], [R], [R], [R, BS]
  std::vector<int64_t> q_off, k_off, last;  // per query vector: its q row, its kv head's offset
                                            // in a slot, its last visible position
};

// The scores of n keys at stride `stride` against q (scaled), and acc += Σ_t p[t] · x_t over n
// value rows: a policy may do either for many rows at once (V::dots / V::axpy_rows, keeping q
// or acc in registers and reducing four dots together); otherwise one row at a time.
template <typename V, typename T, typename C>
void scores_of(const T* q, const C* k, int64_t stride, int64_t n, int64_t D, T scale, T* out) {
  if constexpr (requires { V::dots(q, k, stride, n, D, scale, out); }) {
    V::dots(q, k, stride, n, D, scale, out);
  } else {
    for (int64_t t = 0; t < n; ++t) out[t] = V::dot(q, k + t * stride, D) * scale;
  }
}
template <typename V, typename T, typename C>
void weighted_sum_of(T* acc, const T* p, const C* x, int64_t stride, int64_t n, int64_t D) {
  if constexpr (requires { V::axpy_rows(acc, p, x, stride, n, D); }) {
    V::axpy_rows(acc, p, x, stride, n, D);
  } else {
    for (int64_t t = 0; t < n; ++t) V::axpy(acc, p[t], x + t * stride, D);
  }
}

template <typename T, typename V, typename C = T>
void attention_tile(const ops::AttentionArgs& a, const AttnTile& tl, AttnScratch<T>& w) {
  // Query vector v = (row, kv head, group member): row v / (NG·G), kv head tl.kv_head + v / G
  // % NG, member v % G, where NG = tl.kv_heads and G = query heads per kv head.
  const int64_t G = a.heads / a.kv_heads, NG = tl.kv_heads, D = a.head_dim, BS = a.block_size;
  const int64_t per_row = NG * G, R = tl.rows * per_row;
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
  // Each vector's offsets once per tile (not per key: the divisions cost more than a dot of 64).
  int64_t *q_off = w.q_off.data(), *k_off = w.k_off.data(), *last = w.last.data();
  for (int64_t v = 0; v < R; ++v) {
    const int64_t head = tl.kv_head + v / G % NG;
    q_off[v] = ((row_base + v / per_row) * a.heads + head * G + v % G) * D;
    k_off[v] = head * D;
    last[v] = first_pos + v / per_row;
  }
  for (int64_t b = 0; b * BS <= last_pos; ++b) {
    const int64_t t0 = b * BS, tn = std::min(BS, last_pos + 1 - t0);
    const int64_t base = int64_t{bt[b]} * BS * slot;  // the block's first slot, kv head 0
    const C* kb = static_cast<const C*>(a.k_cache) + base;
    const C* vb = static_cast<const C*>(a.v_cache) + base;
    // Per vector: its scores over the block's visible keys, the online-softmax update, then
    // P · V into its accumulator (the block's rows stay in cache across the tile's vectors).
    for (int64_t v = 0; v < R; ++v) {
      const int64_t nv = std::min(tn, last[v] - t0 + 1);
      if (nv <= 0) continue;
      T* s = sc + v * BS;
      scores_of<V>(q + q_off[v], kb + k_off[v], slot, nv, D, T(a.scale), s);
      T mb = -std::numeric_limits<T>::infinity();
      for (int64_t t = 0; t < nv; ++t) mb = std::max(mb, s[t]);
      const T mn = std::max(m[v], mb), corr = std::exp(m[v] - mn);
      l[v] = l[v] * corr + V::exp_shift(s, nv, mn);
      if (corr != T(1)) V::scale(acc + v * D, corr, D);
      m[v] = mn;
      weighted_sum_of<V>(acc + v * D, s, vb + k_off[v], slot, nv, D);
    }
  }
  T* out = static_cast<T*>(a.out);
  for (int64_t v = 0; v < R; ++v) {
    const T inv = l[v] > T(0) ? T(1) / l[v] : T(0);
    for (int64_t i = 0; i < D; ++i) out[q_off[v] + i] = acc[v * D + i] * inv;
  }
}

// Runs all tiles: thread c takes tiles c, c + nt, c + 2·nt, ... (static, and balanced for causal
// prefill where later tiles cost more). C: the cache's element type (T, Bf16Cache or F16Cache).
template <typename T, typename V, typename C = T>
void attention_run(const ops::AttentionArgs& a) {
  const int64_t G = a.heads / a.kv_heads;
  const int64_t rows_per_tile = std::max<int64_t>(1, 8 / G);
  const std::vector<AttnTile> tiles = attention_tiles(a, rows_per_tile);
  const int64_t n = static_cast<int64_t>(tiles.size());
  const int64_t nt = std::max<int64_t>(1, std::min<int64_t>(num_threads(), n));
  int64_t max_heads = 1;
  for (const AttnTile& t : tiles) max_heads = std::max<int64_t>(max_heads, t.kv_heads);
  parallel_for(nt, 1, [&](int64_t lo, int64_t hi) {
    const int64_t R = rows_per_tile * G * max_heads;
    AttnScratch<T> w{std::vector<T>(R * a.head_dim), std::vector<T>(R), std::vector<T>(R),
                     std::vector<T>(R * a.block_size), std::vector<int64_t>(R), std::vector<int64_t>(R),
                     std::vector<int64_t>(R)};
    for (int64_t c = lo; c < hi; ++c)
      for (int64_t i = c; i < n; i += nt) attention_tile<T, V, C>(a, tiles[i], w);
  });
}

// The f32 kernel of a policy V, by the cache's dtype (f32, bf16 or f16).
template <typename V>
void attention_run_f32(const ops::AttentionArgs& a) {
  switch (a.cache_dtype) {
    case DType::bf16: return attention_run<float, V, Bf16Cache>(a);
    case DType::f16: return attention_run<float, V, F16Cache>(a);
    default: return attention_run<float, V, float>(a);
  }
}

}  // namespace unillm::cpu
