// Decode GEMV (M <= 4 rows of x) with AVX-512: each thread owns a static range of W's rows and
// streams them once, 16 lanes per load, converting bf16/f16 to f32 in registers; x stays in L1.
// It is memory-bound on W, so what matters is keeping loads in flight: every row of the block is
// prefetched kPrefetchBytes ahead. Measured on the stories110M decode shapes (2 threads, an
// Emerald Rapids VM): 19-21 GB/s of weights against 13-14 for the AVX2 GEMV without prefetch and
// 14-18 with it; prefetch distances of 512 B to 2 KiB were within noise, 4 KiB slower.
#include "backends/cpu/kernels/linear_avx512.h"

#include <algorithm>

#include "backends/cpu/simd/vec_avx512.h"
#include "core/dtype.h"
#include "core/parallel.h"

namespace unillm::cpu::avx512 {
namespace {

constexpr int64_t kPrefetchBytes = 1024;

template <DType W>
inline __m512 load_w16(const void* w, int64_t i) {
  if constexpr (W == DType::f32) return _mm512_loadu_ps(static_cast<const float*>(w) + i);
  if constexpr (W == DType::bf16) return load_bf16x16(static_cast<const uint16_t*>(w) + i);
  if constexpr (W == DType::f16) return load_f16x16(static_cast<const uint16_t*>(w) + i);
}

template <DType W>
inline __m512 load_w16(const void* w, int64_t i, __mmask16 m) {
  if constexpr (W == DType::f32) return _mm512_maskz_loadu_ps(m, static_cast<const float*>(w) + i);
  if constexpr (W == DType::bf16) return load_bf16x16(static_cast<const uint16_t*>(w) + i, m);
  if constexpr (W == DType::f16) return load_f16x16(static_cast<const uint16_t*>(w) + i, m);
}

// y[0..M)[n0..n0+R) = x[0..M) · W[n0..n0+R)ᵀ (+ bias); the k tail through masked loads.
template <DType W, int M, int R>
void gemv_block(const float* x, const void* w, const float* bias, float* y, int64_t k,
                int64_t n, int64_t n0) {
  constexpr int64_t es = W == DType::f32 ? 4 : 2;  // bytes per weight
  const char* wb = static_cast<const char*>(w);
  __m512 acc[M][R];
  #pragma GCC unroll 8
  for (int m = 0; m < M; ++m)
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[m][r] = _mm512_setzero_ps();
  int64_t p = 0;
  for (; p + 16 <= k; p += 16) {
    __m512 wv[R];
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      _mm_prefetch(wb + ((n0 + r) * k + p) * es + kPrefetchBytes, _MM_HINT_T0);
      wv[r] = load_w16<W>(w, (n0 + r) * k + p);
    }
    #pragma GCC unroll 8
    for (int m = 0; m < M; ++m) {
      const __m512 xv = _mm512_loadu_ps(x + m * k + p);
      #pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[m][r] = _mm512_fmadd_ps(xv, wv[r], acc[m][r]);
    }
  }
  if (p < k) {
    const __mmask16 t = tail_mask16(k - p);
    __m512 wv[R];
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r) wv[r] = load_w16<W>(w, (n0 + r) * k + p, t);
    #pragma GCC unroll 8
    for (int m = 0; m < M; ++m) {
      const __m512 xv = _mm512_maskz_loadu_ps(t, x + m * k + p);
      #pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[m][r] = _mm512_fmadd_ps(xv, wv[r], acc[m][r]);
    }
  }
  #pragma GCC unroll 8
  for (int m = 0; m < M; ++m)
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
      y[m * n + n0 + r] = hsum16(acc[m][r]) + (bias ? bias[n0 + r] : 0.0f);
}

template <DType W, int M>
void gemv_rows(const ops::LinearArgs& a) {
  // One activation row walks one weight row at a time: 8 rows side by side streamed worse from
  // DRAM (32000 × 768 f32: 25 against 35 GB/s; bf16: 17 against 47), and a decode step's
  // weights come from DRAM (bench/quant.md, seventh run). Several rows reuse each weight load.
  constexpr int R = M == 1 ? 1 : 4;
  const auto* x = static_cast<const float*>(a.x);
  const auto* bias = static_cast<const float*>(a.bias);
  auto* y = static_cast<float*>(a.y);
  const int64_t blocks = a.n / R;
  const int64_t row_bytes = a.k * static_cast<int64_t>(dtype_size(W));
  const int64_t grain = std::max<int64_t>(1, (64 << 10) / std::max<int64_t>(1, R * row_bytes));
  parallel_for(blocks, grain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) gemv_block<W, M, R>(x, a.w, bias, y, a.k, a.n, i * R);
  });
  for (int64_t n0 = blocks * R; n0 < a.n; ++n0) gemv_block<W, M, 1>(x, a.w, bias, y, a.k, a.n, n0);
}

template <DType W>
void gemv_dtype(const ops::LinearArgs& a) {
  switch (a.m) {
    case 1: return gemv_rows<W, 1>(a);
    case 2: return gemv_rows<W, 2>(a);
    case 3: return gemv_rows<W, 3>(a);
    default: return gemv_rows<W, 4>(a);
  }
}

}  // namespace

void gemv(const ops::LinearArgs& a) {
  switch (a.w_dtype) {
    case DType::bf16: return gemv_dtype<DType::bf16>(a);
    case DType::f16: return gemv_dtype<DType::f16>(a);
    default: return gemv_dtype<DType::f32>(a);
  }
}

}  // namespace unillm::cpu::avx512
