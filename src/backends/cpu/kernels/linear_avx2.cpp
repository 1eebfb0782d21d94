// Decode GEMV (M <= 4 rows of x): each thread owns a static range of W's rows and reads them once,
// converting bf16/f16 to f32 in registers; x rows stay in L1. Memory-bound on W for large N·K, so
// each row of a block is prefetched kPrefetchBytes ahead: on the stories110M decode shapes that
// took the weights read from 13-14 GB/s to 14-18 (2 threads, Emerald Rapids VM).
#include "backends/cpu/kernels/linear_avx2.h"

#include "backends/cpu/simd/vec_avx2.h"
#include "core/dtype.h"
#include "core/parallel.h"

namespace unillm::cpu::avx2 {
namespace {

constexpr int64_t kPrefetchBytes = 512;

template <DType W>
inline __m256 load_w8(const void* w, int64_t i) {
  if constexpr (W == DType::f32) return _mm256_loadu_ps(static_cast<const float*>(w) + i);
  if constexpr (W == DType::bf16) return load_bf16x8(static_cast<const uint16_t*>(w) + i);
  if constexpr (W == DType::f16) return load_f16x8(static_cast<const uint16_t*>(w) + i);
}

template <DType W>
inline float load_w1(const void* w, int64_t i) {
  if constexpr (W == DType::f32) return static_cast<const float*>(w)[i];
  if constexpr (W == DType::bf16) return bf16_to_f32(static_cast<const uint16_t*>(w)[i]);
  if constexpr (W == DType::f16) return _cvtsh_ss(static_cast<const uint16_t*>(w)[i]);
}

// y[0..M)[n0..n0+R) = x[0..M) · W[n0..n0+R)ᵀ (+ bias). U independent accumulator sets hide the FMA
// latency when M·R is small.
template <DType W, int M, int R, int U>
void gemv_block(const float* x, const void* w, const float* bias, float* y, int64_t k,
                int64_t n, int64_t n0) {
  constexpr int64_t es = W == DType::f32 ? 4 : 2;  // bytes per weight
  const char* wb = static_cast<const char*>(w);
  __m256 acc[U][M][R];
  #pragma GCC unroll 8
  for (int u = 0; u < U; ++u)
    #pragma GCC unroll 8
    for (int m = 0; m < M; ++m)
      #pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[u][m][r] = _mm256_setzero_ps();
  int64_t p = 0;
  for (; p + 8 * U <= k; p += 8 * U) {
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r) _mm_prefetch(wb + ((n0 + r) * k + p) * es + kPrefetchBytes, _MM_HINT_T0);
    #pragma GCC unroll 8
    for (int u = 0; u < U; ++u) {
      __m256 wv[R];
      #pragma GCC unroll 8
      for (int r = 0; r < R; ++r) wv[r] = load_w8<W>(w, (n0 + r) * k + p + 8 * u);
      #pragma GCC unroll 8
      for (int m = 0; m < M; ++m) {
        __m256 xv = _mm256_loadu_ps(x + m * k + p + 8 * u);
        #pragma GCC unroll 8
        for (int r = 0; r < R; ++r) acc[u][m][r] = _mm256_fmadd_ps(xv, wv[r], acc[u][m][r]);
      }
    }
  }
  for (; p + 8 <= k; p += 8) {
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      __m256 wv = load_w8<W>(w, (n0 + r) * k + p);
      #pragma GCC unroll 8
      for (int m = 0; m < M; ++m)
        acc[0][m][r] = _mm256_fmadd_ps(_mm256_loadu_ps(x + m * k + p), wv, acc[0][m][r]);
    }
  }
  #pragma GCC unroll 8
  for (int m = 0; m < M; ++m) {
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      __m256 s = acc[0][m][r];
      #pragma GCC unroll 8
      for (int u = 1; u < U; ++u) s = _mm256_add_ps(s, acc[u][m][r]);
      float t = hsum(s);
      for (int64_t q = p; q < k; ++q) t += x[m * k + q] * load_w1<W>(w, (n0 + r) * k + q);
      y[m * n + n0 + r] = t + (bias ? bias[n0 + r] : 0.0f);
    }
  }
}

template <DType W, int M>
void gemv_rows(const ops::LinearArgs& a) {
  constexpr int R = M <= 2 ? 4 : 2;
  constexpr int U = M == 1 ? 2 : 1;
  const auto* x = static_cast<const float*>(a.x);
  const auto* bias = static_cast<const float*>(a.bias);
  auto* y = static_cast<float*>(a.y);
  const int64_t blocks = a.n / R;
  const int64_t row_bytes = a.k * static_cast<int64_t>(dtype_size(W));
  const int64_t grain = std::max<int64_t>(1, (64 << 10) / std::max<int64_t>(1, R * row_bytes));
  parallel_for(blocks, grain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) gemv_block<W, M, R, U>(x, a.w, bias, y, a.k, a.n, i * R);
  });
  for (int64_t n0 = blocks * R; n0 < a.n; ++n0) gemv_block<W, M, 1, 1>(x, a.w, bias, y, a.k, a.n, n0);
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

}  // namespace unillm::cpu::avx2
