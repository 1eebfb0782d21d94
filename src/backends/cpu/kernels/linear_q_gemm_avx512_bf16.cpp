// linear_q's GEMM (prefill, batched decode: more than 4 rows) with int8 activations, for CPUs at
// the avx512_bf16 level (all of them have AVX512-VNNI; CMakeLists.txt compiles this file with it).
// The f32 path dequantises W and runs the f32 GEMM: 16 multiply-adds per instruction. Here each
// vpdpbusd multiplies 64 unsigned codes by 64 signed activations, so the products cost about a
// quarter of the instructions, plus one conversion and two multiply-adds per 32 codes.
//
// int4 becomes "code u, value = scale · u + offset" per group, offset = min (asymmetric) or
// −8 · scale (symmetric). x is quantised per block of 32 (scale max|x| / 127, round to nearest),
// as in the GEMV. Then
//   y[i, j] = Σ_g [ Σ_{b in g} scale[j, g] · sx[i, b] · Σ_{k in b} u[j, k] · xq[i, k] ]
//             + Σ_g offset[j, g] · xsum[i, g]
// where xsum is the group's sum of the quantised activations (Σ_b sx · Σ xq), as in the GEMV: the
// result is the product of x̂ and the dequantised W up to f32 rounding.
// int8 codes q are stored as u = q + 128 (vpdpbusd wants unsigned codes); the +128 is taken off
// each block's int32 sum as 128 · Σ_{k in b} xq[i, k], so Σ q · xq is exact in int32 and int8
// has no offset term. (Taking it off in f32 through xsum cancelled two large terms: a change in
// rounding order moved stories260K's int8 perplexity by 0.1 %.)
//
// W is repacked per panel of 32 output columns into [K/4][32][4] bytes: one 64-byte load then
// holds 4 consecutive codes of 16 columns, and one vpdpbusd with 4 broadcast activation bytes of
// a row adds them into 16 int32 sums. A tile of up to 6 rows × 32 columns keeps its int32 block
// sums and f32 results in registers. The panel (32 · K bytes) is packed once per call and reused
// by every row tile; the repacking costs N · K byte moves against M · N · K multiply-adds.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "backends/cpu/kernels/linear_q_simd.h"
#include "backends/cpu/scratch.h"
#include "backends/cpu/simd/vec_avx512.h"
#include "core/parallel.h"

namespace unillm::cpu::avx512_bf16 {
namespace {

constexpr int kNR = 32;  // columns per panel: two zmm of int32 lanes
constexpr int kMR = 6;   // rows per tile: 12 int32 + 12 f32 accumulators, 2 code registers
// (The maskz forms with all lanes set below: GCC 12 warns about the undefined source operand of
// the unmasked intrinsics.)
constexpr __mmask16 kAll = 0xffff;
// (The row loops are unrolled by pragma so that the accumulator arrays live in registers: GCC
// left them on the stack otherwise.)

// Activation row x [K] → xq (int8, natural order) and one scale per block of 32.
void quantize_row(const float* x, int64_t k, int8_t* xq, float* sx) {
  const __m512 sign = _mm512_set1_ps(-0.0f);
  for (int64_t b = 0; b < k / 32; ++b) {
    const __m512 lo = _mm512_loadu_ps(x + b * 32), hi = _mm512_loadu_ps(x + b * 32 + 16);
    const float amax = avx512::hmax16(_mm512_maskz_max_ps(kAll, _mm512_andnot_ps(sign, lo), _mm512_andnot_ps(sign, hi)));
    const float s = amax / 127.0f;
    const __m512 inv = _mm512_set1_ps(s > 0 ? 1.0f / s : 0.0f);
    // cvtps_epi32 rounds to nearest even (the default MXCSR mode), as std::nearbyint does.
    for (int h = 0; h < 2; ++h) {
      const __m512i q = _mm512_maskz_cvtps_epi32(kAll, _mm512_mul_ps(h ? hi : lo, inv));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(xq + b * 32 + h * 16), _mm512_maskz_cvtsepi32_epi8(kAll, q));
    }
    sx[b] = s;
  }
}

// One panel of W: columns [j0, j0 + 32) (fewer at the end of N: the rest get zero codes, scales
// and offsets) as codes [K/4][32][4], block scales [K/32][32] and group offsets [G][32].
struct Panel {
  std::vector<uint8_t> codes, row;
  std::vector<float> scales, offsets, sbuf, obuf;
};

void pack_panel(const ops::QLinearArgs& a, int64_t j0, Panel& p) {
  const bool int8 = a.w_dtype == DType::i8;
  const int64_t K = a.k, nb = K / 32, per_group = int8 ? nb : a.group / 32, G = (nb + per_group - 1) / per_group;
  const int64_t rb = int8 ? K : K / 2, cols = std::min<int64_t>(kNR, a.n - j0);
  p.codes.assign(static_cast<size_t>(K * kNR), 0);
  p.scales.assign(static_cast<size_t>(nb * kNR), 0.0f);
  p.offsets.assign(static_cast<size_t>(G * kNR), 0.0f);
  p.row.resize(static_cast<size_t>(K));
  p.sbuf.resize(static_cast<size_t>(G));
  p.obuf.resize(static_cast<size_t>(G));
  for (int64_t c = 0; c < cols; ++c) {
    const int64_t j = j0 + c;
    const auto* src = static_cast<const uint8_t*>(a.w) + j * rb;
    uint8_t* u = p.row.data();
    if (int8) {
      const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));  // q + 128 as unsigned
      for (int64_t k = 0; k < K; k += 64) {
        const auto m = static_cast<__mmask64>(K - k >= 64 ? ~0ull : (1ull << (K - k)) - 1);
        _mm512_mask_storeu_epi8(u + k, m, _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, src + k), flip));
      }
    } else {  // byte t holds codes 2t (low nibble) and 2t + 1 (high)
      const __m256i low = _mm256_set1_epi8(15);
      for (int64_t t = 0; t < K / 2; t += 32) {  // K / 2 is a multiple of 16
        const auto m = static_cast<__mmask32>(K / 2 - t >= 32 ? ~0u : (1u << (K / 2 - t)) - 1);
        const __m256i v = _mm256_maskz_loadu_epi8(m, src + t);
        const __m256i even = _mm256_and_si256(v, low), odd = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
        const __m256i a0 = _mm256_unpacklo_epi8(even, odd), a1 = _mm256_unpackhi_epi8(even, odd);
        // unpack works within 128-bit lanes: [a0.lo, a1.lo] are codes 2t..2t+31, [a0.hi, a1.hi] the next 32
        const __m512i both = _mm512_maskz_inserti64x4(0xff, _mm512_castsi256_si512(_mm256_permute2x128_si256(a0, a1, 0x20)),
                                                _mm256_permute2x128_si256(a0, a1, 0x31), 1);
        const auto m2 = static_cast<__mmask64>(K - 2 * t >= 64 ? ~0ull : (1ull << (K - 2 * t)) - 1);
        _mm512_mask_storeu_epi8(u + 2 * t, m2, both);
      }
    }
    auto* dst = reinterpret_cast<uint32_t*>(p.codes.data()) + c;
    const auto* words = reinterpret_cast<const uint32_t*>(u);
    for (int64_t s = 0; s < K / 4; ++s) dst[s * kNR] = words[s];
    const float* sc = row_scales(a.scales, a.scale_dtype, j, G, p.sbuf.data());
    const float* mn = a.mins ? row_scales(a.mins, a.scale_dtype, j, G, p.obuf.data()) : nullptr;
    for (int64_t g = 0; g < G; ++g) {
      for (int64_t b = g * per_group; b < std::min(nb, (g + 1) * per_group); ++b) p.scales[b * kNR + c] = sc[g];
      p.offsets[g * kNR + c] = mn ? mn[g] : int8 ? 0.0f : -8.0f * sc[g];  // (int8: in int32, see the top)
    }
  }
}

struct Rows {
  const int8_t* xq;   // [M, K]
  const float* sx;    // [M, K/32]
  const float* xsum;  // [M, G] (int4)
  const int32_t* shift;  // int8: [M, K/32] 128 · Σ xq over each block, taken off its int32 sums; else nullptr
};

// y[r, j0 + c] for r < MR rows starting at row i0, c < cols (≤ 32), over all of K.
template <int MR>
void tile(const Rows& x, int64_t i0, const Panel& p, int64_t K, int64_t G, int64_t per_group, const float* bias,
          float* y, int64_t ldy, int64_t cols) {
  const int64_t nb = K / 32;
  __m512 f[MR][2];
  #pragma GCC unroll 6
  for (int r = 0; r < MR; ++r) f[r][0] = f[r][1] = _mm512_setzero_ps();
  const uint8_t* w = p.codes.data();
  for (int64_t g = 0; g < G; ++g) {
    for (int64_t b = g * per_group; b < std::min(nb, (g + 1) * per_group); ++b) {
      __m512i acc[MR][2];
      #pragma GCC unroll 6
      for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int s = 0; s < 8; ++s) {
        const __m512i w0 = _mm512_loadu_si512(w + (b * 8 + s) * 128), w1 = _mm512_loadu_si512(w + (b * 8 + s) * 128 + 64);
        #pragma GCC unroll 6
        for (int r = 0; r < MR; ++r) {
          int32_t word;
          std::memcpy(&word, x.xq + (i0 + r) * K + b * 32 + s * 4, 4);
          const __m512i xb = _mm512_set1_epi32(word);
          acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], w0, xb);
          acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], w1, xb);
        }
      }
      if (x.shift) {
        #pragma GCC unroll 6
        for (int r = 0; r < MR; ++r) {
          const __m512i sh = _mm512_set1_epi32(x.shift[(i0 + r) * nb + b]);
          acc[r][0] = _mm512_sub_epi32(acc[r][0], sh);
          acc[r][1] = _mm512_sub_epi32(acc[r][1], sh);
        }
      }
      const __m512 s0 = _mm512_loadu_ps(p.scales.data() + b * kNR), s1 = _mm512_loadu_ps(p.scales.data() + b * kNR + 16);
      #pragma GCC unroll 6
      for (int r = 0; r < MR; ++r) {
        const __m512 xs = _mm512_set1_ps(x.sx[(i0 + r) * nb + b]);
        f[r][0] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_maskz_cvtepi32_ps(kAll, acc[r][0]), xs), s0, f[r][0]);
        f[r][1] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_maskz_cvtepi32_ps(kAll, acc[r][1]), xs), s1, f[r][1]);
      }
    }
    if (x.shift) continue;  // int8: no offset
    const __m512 o0 = _mm512_loadu_ps(p.offsets.data() + g * kNR), o1 = _mm512_loadu_ps(p.offsets.data() + g * kNR + 16);
    #pragma GCC unroll 6
    for (int r = 0; r < MR; ++r) {
      const __m512 xs = _mm512_set1_ps(x.xsum[(i0 + r) * G + g]);
      f[r][0] = _mm512_fmadd_ps(xs, o0, f[r][0]);
      f[r][1] = _mm512_fmadd_ps(xs, o1, f[r][1]);
    }
  }
  const auto m0 = static_cast<__mmask16>(cols >= 16 ? 0xffff : (1u << cols) - 1);
  const auto m1 = static_cast<__mmask16>(cols >= 32 ? 0xffff : cols <= 16 ? 0 : (1u << (cols - 16)) - 1);
  const __m512 b0 = bias ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
  const __m512 b1 = bias ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
  #pragma GCC unroll 6
  for (int r = 0; r < MR; ++r) {
    _mm512_mask_storeu_ps(y + (i0 + r) * ldy, m0, _mm512_add_ps(f[r][0], b0));
    _mm512_mask_storeu_ps(y + (i0 + r) * ldy + 16, m1, _mm512_add_ps(f[r][1], b1));
  }
}

using TileFn = void (*)(const Rows&, int64_t, const Panel&, int64_t, int64_t, int64_t, const float*, float*, int64_t,
                        int64_t);
constexpr TileFn kTiles[kMR + 1] = {nullptr, &tile<1>, &tile<2>, &tile<3>, &tile<4>, &tile<5>, &tile<6>};

}  // namespace

bool linear_q_gemm_vnni(const ops::QLinearArgs& a) {
  const bool int8 = a.w_dtype == DType::i8;
  if (!a.int8_activations || a.k % 32 != 0 || (!int8 && (a.w_dtype != DType::u4x2 || a.group % 32 != 0)))
    return false;
  // Groups are whole 32-blocks; the last one is shorter when the group does not divide K.
  const int64_t M = a.m, K = a.k, nb = K / 32, per_group = int8 ? nb : a.group / 32, G = (nb + per_group - 1) / per_group;
  // From the allocator's block cache (Scratch): a fresh vector per call of a prefill's size was
  // mmapped and zero-filled by the kernel each time (a third of a 256-token prefill's profile).
  Scratch<float> xq_buf((M * K + 3) / 4), sx(M * nb), xsum(M * G), shift_buf(int8 ? M * nb : 0);
  auto* xq = reinterpret_cast<int8_t*>(xq_buf.data());
  auto* shift = reinterpret_cast<int32_t*>(shift_buf.data());
  parallel_for(M, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      quantize_row(a.x + i * K, K, xq + i * K, sx.data() + i * nb);
      for (int64_t g = 0; g < G; ++g) {  // the quantised activations' sum over the group
        float s = 0;
        for (int64_t b = g * per_group; b < std::min(nb, (g + 1) * per_group); ++b) {
          int32_t t = 0;
          for (int q = 0; q < 32; ++q) t += xq[i * K + b * 32 + q];
          s += sx.data()[i * nb + b] * static_cast<float>(t);
          if (int8) shift[i * nb + b] = 128 * t;
        }
        xsum.data()[i * G + g] = s;
      }
    }
  });
  const Rows rows{xq, sx.data(), xsum.data(), int8 ? shift : nullptr};
  const int64_t panels = (a.n + kNR - 1) / kNR;
  parallel_for(panels, 1, [&](int64_t lo, int64_t hi) {
    Panel p;
    for (int64_t q = lo; q < hi; ++q) {
      const int64_t j0 = q * kNR, cols = std::min<int64_t>(kNR, a.n - j0);
      pack_panel(a, j0, p);
      const float* bias = a.bias ? a.bias + j0 : nullptr;
      for (int64_t i0 = 0; i0 < M; i0 += kMR) {
        const int64_t mr = std::min<int64_t>(kMR, M - i0);
        kTiles[mr](rows, i0, p, K, G, per_group, bias, a.y + j0, a.n, cols);
      }
    }
  });
  return true;
}

}  // namespace unillm::cpu::avx512_bf16
