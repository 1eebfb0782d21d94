// linear_q's int4 decode GEMV with int8 activations, for CPUs at the avx512_bf16 level (every
// such CPU also has AVX512-VNNI; this file is compiled with both, CMakeLists.txt). x is quantised
// per block of 32 (scale max|x| / 127, round to nearest); each pair of blocks multiplies 64 codes
// by 64 activations in one vpdpbusd (u8 codes x s8 activations -> s32), instead of widening every
// code to f32. The codes of a block are its 16 bytes' low nibbles (even k) then high nibbles (odd
// k), so the activations are stored in that order: [A even, B even, A odd, B odd] per pair.
#include "backends/cpu/kernels/linear_q_simd.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/simd/vec_avx512.h"
#include "core/parallel.h"

namespace unillm::cpu::avx512_bf16 {
namespace {

constexpr __mmask16 kAll = 0xffff;

// One block of 32 activations to int8 (scale max|x| / 127, round to nearest): the 16 even ones
// to even[0..15], the 16 odd ones to odd[0..15] (the order the codes come out of their bytes).
// Returns the scale; *sum = the block's sum as quantised (scale · Σ codes).
float quantize_block(const float* xb, int8_t* even, int8_t* odd, float* sum) {
  float amax = 0;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(xb[i]));
  const float s = amax / 127.0f, inv = s > 0 ? 1.0f / s : 0.0f;
  int32_t t = 0;
  for (int i = 0; i < 16; ++i) {
    even[i] = static_cast<int8_t>(std::nearbyint(xb[2 * i] * inv));
    odd[i] = static_cast<int8_t>(std::nearbyint(xb[2 * i + 1] * inv));
    t += even[i] + odd[i];
  }
  *sum = s * static_cast<float>(t);
  return s;
}

// The code offsets' share uses each group's sum of the QUANTISED activations, so the result is
// the product of x̂ and the dequantised W up to f32 rounding, off the exact one by at most
// Σ |w| · |x − x̂| (with exact sums the bound would be Σ |w − offset| · |x − x̂|, larger).
// bsum: the blocks' sums (quantize_block); k a multiple of 32, group of 32-blocks.
void group_sums(const float* bsum, int64_t k, int64_t group, float* xsum) {
  const int64_t nb = k / 32, per = group / 32;
  for (int64_t g = 0; g * per < nb; ++g) {
    float s = 0;
    for (int64_t b = g * per; b < std::min(nb, (g + 1) * per); ++b) s += bsum[b];
    xsum[g] = s;
  }
}

// x [K] → per block of 32 a scale and 32 int8 activations, laid out per pair of blocks as the
// codes come out of their bytes.
void quantize_x(const float* x, int64_t k, int8_t* xq, float* sx, float* bsum) {
  for (int64_t b = 0; b < k / 32; ++b) {
    int8_t* pair = xq + (b / 2) * 64;
    const int half = static_cast<int>(b % 2) * 16;  // A: bytes 0-15 / 32-47, B: 16-31 / 48-63
    sx[b] = quantize_block(x + b * 32, pair + half, pair + 32 + half, bsum + b);
  }
}

// Σ_g scale_g Σ_{k in g} x_k c_k over one row, with x as quantised by quantize_x.
float row_u4_vnni(const uint8_t* row, const int8_t* xq, const float* sx, const float* scales, int64_t k,
                  int64_t group) {
  const __m512i lanes = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1);
  const __m256i low = _mm256_set1_epi8(15);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t p = 0; p < k / 64; ++p) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + p * 32));
    const __m256i even = _mm256_and_si256(v, low), odd = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
    const __m512i codes = _mm512_maskz_inserti64x4(0xff, _mm512_castsi256_si512(even), odd, 1);
    const __m512i xv = _mm512_loadu_si512(xq + p * 64);
    const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), codes, xv);
    const int64_t b0 = 2 * p, b1 = 2 * p + 1;
    const float s0 = scales[b0 * 32 / group] * sx[b0], s1 = scales[b1 * 32 / group] * sx[b1];
    const __m512 sv = _mm512_maskz_permutexvar_ps(kAll, lanes, _mm512_castps128_ps512(_mm_setr_ps(s0, s1, 0, 0)));
    acc = _mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(kAll, dot), sv, acc);
  }
  return avx512::hsum16(acc);
}

// The wide variant, for K a multiple of 128 and groups of 32, 64 or a multiple of 128: 128 codes
// (one 64-byte load: blocks A-D, 16 bytes each) per step. Their low nibbles (the even k of the
// four blocks) and high nibbles (the odd k) meet x in two vpdpbusd; int32 lane l then holds a
// partial sum of block l/4 of the step, so one f32 multiply by (weight scale × x scale) per lane
// and one fma accumulate it: about half the instructions per weight byte of row_u4_vnni.
// x is laid out per step as 64 bytes in the low-nibble order, then 64 in the high-nibble order.
void quantize_x_wide(const float* x, int64_t k, int8_t* xq, float* sxv, float* bsum) {
  for (int64_t b = 0; b < k / 32; ++b) {
    int8_t* step = xq + (b / 4) * 128;
    const int64_t at = (b % 4) * 16;
    const float s = quantize_block(x + b * 32, step + at, step + 64 + at, bsum + b);
    for (int l = 0; l < 4; ++l) sxv[(b / 4) * 16 + (b % 4) * 4 + l] = s;  // its four int32 lanes
  }
}

float row_u4_vnni_wide(const uint8_t* row, const int8_t* xq, const float* sxv, const float* scales, int64_t k,
                       int64_t group, __m512i scale_lanes, __mmask8 scale_mask) {
  const __m512i low = _mm512_set1_epi8(15);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t p = 0; p < k / 128; ++p) {
    const __m512i v = _mm512_loadu_si512(row + p * 64);
    const __m512i even = _mm512_and_si512(v, low), odd = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
    __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), even, _mm512_loadu_si512(xq + p * 128));
    dot = _mm512_dpbusd_epi32(dot, odd, _mm512_loadu_si512(xq + p * 128 + 64));
    const __m128 ws = _mm_maskz_loadu_ps(scale_mask, scales + p * 128 / group);
    // (maskz forms: gcc 12 warns about the undefined source operand of the unmasked ones)
    const __m512 sv = _mm512_mul_ps(_mm512_maskz_permutexvar_ps(kAll, scale_lanes, _mm512_zextps128_ps512(ws)),
                                    _mm512_loadu_ps(sxv + p * 16));
    acc = _mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(kAll, dot), sv, acc);
  }
  return avx512::hsum16(acc);
}

// Output row j's G scales (or mins) as f32, as cpu::row_scales, with f16 widened in place by
// vcvtph2ps (every avx512_bf16 CPU has it): the shared helper's call per row showed in profiles.
const float* row_scales_f16c(const void* base, DType dtype, int64_t j, int64_t G, float* buf) {
  if (dtype != DType::f16) return row_scales(base, dtype, j, G, buf);
  const auto* h = static_cast<const uint16_t*>(base) + j * G;
  int64_t g = 0;
  for (; g + 16 <= G; g += 16)
    _mm512_storeu_ps(buf + g, _mm512_maskz_cvtph_ps(kAll, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + g))));
  if (g < G) {
    const auto m = static_cast<__mmask16>((1u << (G - g)) - 1);
    _mm512_mask_storeu_ps(buf + g, m, _mm512_maskz_cvtph_ps(m, _mm256_maskz_loadu_epi16(m, h + g)));
  }
  return buf;
}

// Σ_g a_g · b_g over n groups.
float dot_groups(const float* a, const float* b, int64_t n) {
  __m512 acc = _mm512_setzero_ps();
  int64_t g = 0;
  for (; g + 16 <= n; g += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + g), _mm512_loadu_ps(b + g), acc);
  if (g < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - g)) - 1);
    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + g), _mm512_maskz_loadu_ps(m, b + g), acc);
  }
  return avx512::hsum16(acc);
}

// The wide GEMV for f16 scales (the int4 default). Each step's scales and minimums are widened
// in register (vcvtph2ps on the step's 1-4 entries, permuted to their lanes) instead of copied
// per row into f32 buffers, and the minimums' share joins the same accumulator through the
// blocks' sums spread over their four lanes (bsumv: block sum / 4 per lane; symmetric codes,
// w = scale · (c − 8): −2 · block sum, added before the scale), so a row ends in one horizontal
// sum. Same result as row_u4_vnni_wide + dot_groups up to f32 rounding order. One row at a
// time on purpose: passes over 2 or 4 adjacent rows sharing the activation loads were faster
// in cache but slower streaming from DRAM (128000 × 768: 28 GB/s at one row, 24 at two, 14 at
// four; bench/quant.md), and a decode step's weights stream from DRAM.
struct WideF16 {
  const int8_t* xq;
  const float* sxv;  // per step 16 lanes: the x block's scale
  const float* bsumv;  // per step 16 lanes: block sum / 4 (asymmetric) or −2 · block sum (symmetric)
  int64_t steps, group;
  __m512i scale_lanes;
  __mmask8 scale_mask;
};

float row_u4_vnni_f16(const WideF16& c, const uint8_t* w, const uint16_t* scales, const uint16_t* mins) {
  const __m512i low = _mm512_set1_epi8(15);
  auto widen = [&](const uint16_t* h) {
    return _mm512_maskz_permutexvar_ps(kAll, c.scale_lanes,
                                       _mm512_zextps128_ps512(_mm_cvtph_ps(_mm_maskz_loadu_epi16(c.scale_mask, h))));
  };
  __m512 acc = _mm512_setzero_ps();
  for (int64_t p = 0; p < c.steps; ++p) {
    const __m512i v = _mm512_loadu_si512(w + p * 64);
    const __m512i even = _mm512_and_si512(v, low), odd = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
    __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), even, _mm512_loadu_si512(c.xq + p * 128));
    dot = _mm512_dpbusd_epi32(dot, odd, _mm512_loadu_si512(c.xq + p * 128 + 64));
    const __m512 d = _mm512_maskz_cvtepi32_ps(kAll, dot), sx = _mm512_loadu_ps(c.sxv + p * 16);
    const __m512 bs = _mm512_loadu_ps(c.bsumv + p * 16), ws = widen(scales + p * 128 / c.group);
    if (mins) {
      acc = _mm512_fmadd_ps(_mm512_mul_ps(d, sx), ws, acc);
      acc = _mm512_fmadd_ps(widen(mins + p * 128 / c.group), bs, acc);
    } else {
      acc = _mm512_fmadd_ps(_mm512_fmadd_ps(d, sx, bs), ws, acc);
    }
  }
  return avx512::hsum16(acc);
}

bool linear_q_u4_vnni_wide(const ops::QLinearArgs& a) {
  if (a.k % 128 != 0 || !(a.group == 32 || a.group == 64 || a.group % 128 == 0)) return false;
  // (a group wider than K, or not dividing it, still stores ceil(K / group) per row)
  const int64_t G = (a.k + a.group - 1) / a.group, rb = a.k / 2, steps = a.k / 128;
  // Lane l of a step belongs to block l/4, whose scale is entry (l/4)·32/group of the step's.
  const int per_scale = static_cast<int>(std::min<int64_t>(a.group / 32, 4));
  alignas(64) int32_t lanes[16];
  for (int l = 0; l < 16; ++l) lanes[l] = l / 4 / per_scale;
  const __m512i scale_lanes = _mm512_load_si512(lanes);
  const auto scale_mask = static_cast<__mmask8>((1u << (4 / per_scale)) - 1);
  std::vector<int8_t> xq(a.m * a.k);
  // Group sums of x̂ for the f32-scale rows' offsets (the f16 rows take the block sums, bsumv).
  const bool f16 = a.scale_dtype == DType::f16;
  std::vector<float> sxv(a.m * steps * 16), xsum(f16 ? 0 : a.m * G), bsum(a.k / 32), bsumv(a.m * steps * 16);
  for (int64_t i = 0; i < a.m; ++i) {
    quantize_x_wide(a.x + i * a.k, a.k, xq.data() + i * a.k, sxv.data() + i * steps * 16, bsum.data());
    if (!f16) group_sums(bsum.data(), a.k, a.group, xsum.data() + i * G);
    for (int64_t b = 0; b < a.k / 32; ++b)
      for (int l = 0; l < 4; ++l)
        bsumv[i * steps * 16 + (b / 4) * 16 + (b % 4) * 4 + l] = a.mins ? bsum[b] * 0.25f : -2.0f * bsum[b];
  }
  if (f16) {
    const auto* scales = static_cast<const uint16_t*>(a.scales);
    const auto* mins = static_cast<const uint16_t*>(a.mins);
    parallel_for(a.n, 16, [&](int64_t lo, int64_t hi) {
      for (int64_t i = 0; i < a.m; ++i) {
        const WideF16 c{xq.data() + i * a.k, sxv.data() + i * steps * 16, bsumv.data() + i * steps * 16, steps,
                        a.group, scale_lanes, scale_mask};
        for (int64_t j = lo; j < hi; ++j)
          a.y[i * a.n + j] = (a.bias ? a.bias[j] : 0.0f) +
                             row_u4_vnni_f16(c, static_cast<const uint8_t*>(a.w) + j * rb, scales + j * G,
                                             mins ? mins + j * G : nullptr);
      }
    });
    return true;
  }
  parallel_for(a.n, 16, [&](int64_t lo, int64_t hi) {
    std::vector<float> sbuf(static_cast<size_t>(G)), offs(static_cast<size_t>(G));
    for (int64_t j = lo; j < hi; ++j) {
      const auto* row = static_cast<const uint8_t*>(a.w) + j * rb;
      const float* scales = row_scales_f16c(a.scales, a.scale_dtype, j, G, sbuf.data());
      const float* mins = a.mins ? row_scales_f16c(a.mins, a.scale_dtype, j, G, offs.data()) : offs.data();
      if (!a.mins)  // symmetric: w = scale · (c − 8)
        for (int64_t g = 0; g < G; ++g) offs[g] = -8.0f * scales[g];
      for (int64_t i = 0; i < a.m; ++i)
        a.y[i * a.n + j] = (a.bias ? a.bias[j] : 0.0f) +
                           row_u4_vnni_wide(row, xq.data() + i * a.k, sxv.data() + i * steps * 16, scales, a.k,
                                            a.group, scale_lanes, scale_mask) +
                           dot_groups(mins, xsum.data() + i * G, G);
    }
  });
  return true;
}

}  // namespace

bool linear_q_u4_vnni(const ops::QLinearArgs& a) {
  if (!a.int8_activations || a.w_dtype != DType::u4x2 || a.group % 32 != 0 || a.k % 64 != 0) return false;
  if (linear_q_u4_vnni_wide(a)) return true;
  const int64_t G = (a.k + a.group - 1) / a.group, rb = (a.k + 1) / 2, nb = a.k / 32;
  std::vector<int8_t> xq(a.m * a.k);
  std::vector<float> sx(a.m * nb), xsum(a.m * G), bsum(nb);
  for (int64_t i = 0; i < a.m; ++i) {
    quantize_x(a.x + i * a.k, a.k, xq.data() + i * a.k, sx.data() + i * nb, bsum.data());
    group_sums(bsum.data(), a.k, a.group, xsum.data() + i * G);
  }
  parallel_for(a.n, 16, [&](int64_t lo, int64_t hi) {
    std::vector<float> sbuf(static_cast<size_t>(G)), mbuf(static_cast<size_t>(G));
    for (int64_t j = lo; j < hi; ++j) {
      const auto* row = static_cast<const uint8_t*>(a.w) + j * rb;
      const float* scales = row_scales_f16c(a.scales, a.scale_dtype, j, G, sbuf.data());
      const float* mins = a.mins ? row_scales_f16c(a.mins, a.scale_dtype, j, G, mbuf.data()) : nullptr;
      for (int64_t i = 0; i < a.m; ++i) {
        float s = (a.bias ? a.bias[j] : 0.0f) + row_u4_vnni(row, xq.data() + i * a.k, sx.data() + i * nb, scales, a.k, a.group);
        for (int64_t g = 0; g < G; ++g) s += (mins ? mins[g] : -8.0f * scales[g]) * xsum[i * G + g];
        a.y[i * a.n + j] = s;
      }
    }
  });
  return true;
}

}  // namespace unillm::cpu::avx512_bf16
