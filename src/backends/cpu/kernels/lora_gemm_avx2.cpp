// AVX2/FMA kernel for the skinny f32 GEMMs of ops::lora_linear (one of m, n, k is a LoRA rank,
// at most kLoraSmall): broadcast-FMA register tiles (12 accumulators) over a row-major [k, n]
// right operand (Bᵀ is packed first when B comes transposed). Each C element sums k in order
// 0..k-1 (the reductions over tokens, op(A) = Aᵀ, run k in chunks through an f32 scratch, which
// keeps that order), so results do not depend on the thread count or the tiling.
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "backends/cpu/gemm/gemm_backward.h"
#include "backends/cpu/kernels/lora_gemm_avx2.h"

namespace unillm::cpu::avx2 {
namespace {

// Tokens per chunk of a reduction over k (op(A) = Aᵀ): the chunk of both operands stays in L2
// while every tile of C passes over it.
constexpr int64_t kChunk = 128;
// Column vectors per tile where C is wide (12 / kWideNv rows at a time walk along the rows);
// chunk() takes the remaining 1..3.
constexpr int kWideNv = 3;

// C[m, n] (ldc) = alpha · op(A) · B + beta · C with B row-major [k, n] (ldb). scratch [m, sld]
// holds partial sums between k chunks (null when k runs in one go).
struct Skinny {
  const float* a;
  const float* b;
  float* c;
  int64_t lda, ldb, ldc;
  float alpha, beta;
  float* scratch;
  int64_t sld;
};

// A k range of one pass: start from zero (first) or the scratch; end in C (last) or the scratch.
struct Pass {
  int64_t k0, k1;
  bool first, last;
};

// The first n (0..8) lanes set.
__m256i lanes(int64_t n) {
  alignas(32) static const int32_t kBits[16] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                                0,  0,  0,  0,  0,  0,  0,  0};
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kBits + 8 - n));
}

// C tile at cp = alpha · acc + beta · C (C not read when beta is 0).
template <int MR, int NV, bool MASKED>
__attribute__((always_inline)) inline void finish(const Skinny& g, const __m256 (&acc)[MR][NV],
                                                  float* cp, __m256i mask) {
  const __m256 alpha = _mm256_set1_ps(g.alpha), beta = _mm256_set1_ps(g.beta);
  const bool read_c = g.beta != 0.0f;
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r, cp += g.ldc)
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) {
      const bool m = MASKED && v == NV - 1;
      __m256 out = _mm256_mul_ps(alpha, acc[r][v]);
      if (read_c) {
        const __m256 c = m ? _mm256_maskload_ps(cp + 8 * v, mask) : _mm256_loadu_ps(cp + 8 * v);
        out = _mm256_fmadd_ps(beta, c, out);
      }
      if (m)
        _mm256_maskstore_ps(cp + 8 * v, mask, out);
      else
        _mm256_storeu_ps(cp + 8 * v, out);
    }
}

// C rows i0..i0+MR, columns j0..j0+8·NV over k in [ps.k0, ps.k1) (the last vector masked when
// MASKED; the scratch is padded to whole vectors and needs no mask).
template <int MR, int NV, bool TA, bool MASKED>
void tile(const Skinny& g, int64_t i0, int64_t j0, __m256i mask, const Pass& ps) {
  __m256 acc[MR][NV];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v)
      acc[r][v] = ps.first ? _mm256_setzero_ps()
                           : _mm256_loadu_ps(g.scratch + (i0 + r) * g.sld + j0 + 8 * v);
  if (ps.last && g.beta != 0.0f)  // C arrives while the k loop runs
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const float* cr = g.c + (i0 + r) * g.ldc + j0;
      _mm_prefetch(reinterpret_cast<const char*>(cr), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(cr + 8 * NV - 1), _MM_HINT_T0);
    }
  const int64_t lda = g.lda, ldb = g.ldb;
  const float* bp = g.b + ps.k0 * ldb + j0;
  const float* ap = TA ? g.a + ps.k0 * lda + i0 : g.a + i0 * lda + ps.k0;
  for (int64_t p = ps.k0; p < ps.k1; ++p, bp += ldb, ap += TA ? lda : 1) {
    __m256 bv[NV];
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v)
      bv[v] = MASKED && v == NV - 1 ? _mm256_maskload_ps(bp + 8 * v, mask)
                                    : _mm256_loadu_ps(bp + 8 * v);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const __m256 av = _mm256_broadcast_ss(TA ? ap + r : ap + r * lda);
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
  if (ps.last)
    finish<MR, NV, MASKED>(g, acc, g.c + i0 * g.ldc + j0, mask);
  else
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v)
        _mm256_storeu_ps(g.scratch + (i0 + r) * g.sld + j0 + 8 * v, acc[r][v]);
}

// One tile of exactly `rows` (1..MR) rows.
template <int MR, int NV, bool TA, bool MASKED>
void rows_tile(const Skinny& g, int64_t rows, int64_t i0, int64_t j0, __m256i mask,
               const Pass& ps) {
  if constexpr (MR > 1)
    if (rows < MR) return rows_tile<MR - 1, NV, TA, MASKED>(g, rows, i0, j0, mask, ps);
  tile<MR, NV, TA, MASKED>(g, i0, j0, mask, ps);
}

// Rows [lo, hi) x columns j0..j0+8·NV in tiles of 12 / NV rows.
template <int NV, bool TA, bool MASKED>
void column_chunk(const Skinny& g, int64_t lo, int64_t hi, int64_t j0, __m256i mask,
                  const Pass& ps) {
  constexpr int kRows = 12 / NV;
  for (int64_t i = lo; i < hi; i += kRows)
    rows_tile<kRows, NV, TA, MASKED>(g, std::min<int64_t>(kRows, hi - i), i, j0, mask, ps);
}

// Rows [lo, hi) x nv (1..3) column vectors from j0.
template <bool TA>
void chunk(const Skinny& g, int nv, bool masked, int64_t lo, int64_t hi, int64_t j0, __m256i mask,
           const Pass& ps) {
  if (masked) {
    if (nv == 3) column_chunk<3, TA, true>(g, lo, hi, j0, mask, ps);
    if (nv == 2) column_chunk<2, TA, true>(g, lo, hi, j0, mask, ps);
    if (nv == 1) column_chunk<1, TA, true>(g, lo, hi, j0, mask, ps);
  } else {
    if (nv == 3) column_chunk<3, TA, false>(g, lo, hi, j0, mask, ps);
    if (nv == 2) column_chunk<2, TA, false>(g, lo, hi, j0, mask, ps);
    if (nv == 1) column_chunk<1, TA, false>(g, lo, hi, j0, mask, ps);
  }
}

// C rows [i_lo, i_hi) x columns [j_lo, j_hi) for one pass: blocks of 12 rows; within a block,
// 12 / kWideNv rows at a time walk the chunks of kWideNv whole column vectors (few C streams at
// once), then the last vectors (the very last masked when the width is not a multiple of 8) take
// the 12 rows together.
template <bool TA>
void block(const Skinny& g, int64_t i_lo, int64_t i_hi, int64_t j_lo, int64_t j_hi,
           const Pass& ps) {
  const int64_t width = j_hi - j_lo, tail = width % 8;
  const int64_t vectors = width / 8 + (tail ? 1 : 0);
  const int64_t whole = tail ? vectors - 1 : vectors;
  const int64_t wide = whole / kWideNv * kWideNv;
  const int rest = static_cast<int>(vectors - wide);  // 0..kWideNv (= 3) vectors
  const __m256i mask = lanes(tail ? tail : 8);
  for (int64_t i = i_lo; i < i_hi; i += 12) {
    const int64_t hi = std::min(i + 12, i_hi);
    for (int64_t r = i; r < hi; r += 12 / kWideNv)
      for (int64_t v = 0; v < wide; v += kWideNv)
        column_chunk<kWideNv, TA, false>(g, r, std::min(r + 12 / kWideNv, hi), j_lo + 8 * v, mask,
                                         ps);
    if (rest > 0) chunk<TA>(g, rest, tail != 0, i, hi, j_lo + 8 * wide, mask, ps);
  }
}

}  // namespace

bool lora_gemm_f32_fits(const ops::LoraGemmArgs& g) {
  return std::min({g.m, g.n, g.k}) <= kLoraSmall &&
         (!g.trans_b || std::min(g.n, g.k) <= kLoraSmall);
}

void lora_gemm_f32(const ops::LoraGemmArgs& g) {
  Skinny s{static_cast<const float*>(g.a),
           static_cast<const float*>(g.b),
           static_cast<float*>(g.c),
           g.lda,
           g.ldb,
           g.ldc,
           static_cast<float>(g.alpha),
           static_cast<float>(g.beta),
           nullptr,
           0};
  std::vector<float> packed;  // Bᵀ as [k, n] when B comes transposed ([n, k], ldb)
  if (g.trans_b) {
    packed.resize(static_cast<size_t>(g.k * g.n));
    for (int64_t j = 0; j < g.n; ++j)
      for (int64_t p = 0; p < g.k; ++p) packed[p * g.n + j] = s.b[j * g.ldb + p];
    s.b = packed.data();
    s.ldb = g.n;
  }
  // op(A) = Aᵀ reduces over a long k (tokens): run it in chunks, partial sums in the scratch.
  const int64_t chunk = g.trans_a && g.k > kChunk ? kChunk : std::max<int64_t>(g.k, 1);
  std::vector<float> scratch;
  if (chunk < g.k) {
    s.sld = (g.n + 7) / 8 * 8;
    scratch.resize(static_cast<size_t>(g.m * s.sld));
    s.scratch = scratch.data();
  }
  // Split the larger of m and n statically (n in whole vectors); no split of k.
  const bool split_m = g.m >= g.n;
  const int64_t len = split_m ? g.m : (g.n + 7) / 8;
  const int64_t parts = parts_for(split_m ? len : len * 8, 64);
  for_parts(len, parts, [&](int64_t, int64_t lo, int64_t hi) {
    const int64_t i_lo = split_m ? lo : 0, i_hi = split_m ? hi : g.m;
    const int64_t j_lo = split_m ? 0 : lo * 8, j_hi = split_m ? g.n : std::min(hi * 8, g.n);
    for (int64_t k0 = 0;; k0 += chunk) {
      const Pass ps{k0, std::min(k0 + chunk, g.k), k0 == 0, k0 + chunk >= g.k};
      if (g.trans_a)
        block<true>(s, i_lo, i_hi, j_lo, j_hi, ps);
      else
        block<false>(s, i_lo, i_hi, j_lo, j_hi, ps);
      if (ps.last) break;
    }
  });
}

}  // namespace unillm::cpu::avx2
