// CPU linear_q (weight-only int8 / int4, ops/quant.h). Decode-sized products (M <= 4) read the
// codes directly, one pass over W (the GEMV is bandwidth-bound: int8 reads a quarter of f32's
// bytes, int4 an eighth plus its scales); larger M dequantises panels of W rows into f32 and runs
// the f32 GEMM on each (prefill is compute-bound, and the GEMM is the fastest f32 kernel there).
//
// Per output row and group g of K: y += scale_g · Σ x_k c_k, plus the code offset folded in
// through the group's activation sum: + min_g · Σ x_k (asymmetric int4) or − 8 · scale_g · Σ x_k
// (symmetric int4). The inner dots over the codes are the ISA-specific part (QDots).
#include <algorithm>
#include <vector>

#include "backends/cpu/gemm/provider.h"
#include "backends/cpu/kernels/linear_q_simd.h"
#include "backends/cpu/kernels/register_kernels.h"
#include "backends/cpu/scratch.h"
#include "backends/cpu/simd/convert.h"
#include "backends/cpu/simd/simd.h"
#include "core/parallel.h"
#include "core/registry.h"
#include "ops/quant.h"

namespace unillm::cpu {

namespace portable {

float dot_i8(const float* x, const int8_t* q, int64_t n) {
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += x[i] * static_cast<float>(q[i]);
  return s;
}

float dot_u4(const float* x, const uint8_t* row, int64_t k0, int64_t n) {
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += x[i] * static_cast<float>(ops::unpack_u4(row, k0 + i));
  return s;
}

float row_u4(const float* x, const uint8_t* row, const float* scales, int64_t k, int64_t group) {
  float s = 0;
  for (int64_t k0 = 0, g = 0; k0 < k; k0 += group, ++g) s += scales[g] * dot_u4(x + k0, row, k0, std::min(group, k - k0));
  return s;
}

}  // namespace portable

namespace {

using ops::QLinearArgs;

constexpr int64_t kGemvMaxRows = 4;

int64_t row_bytes(const QLinearArgs& a) { return a.w_dtype == DType::i8 ? a.k : (a.k + 1) / 2; }

// Dequantises rows [r0, r0 + rows) of W into out [rows, K].
void dequantize_rows(const QLinearArgs& a, int64_t r0, int64_t rows, float* out) {
  const int64_t G = (a.k + a.group - 1) / a.group, rb = row_bytes(a);
  std::vector<float> sbuf(static_cast<size_t>(G)), mbuf(static_cast<size_t>(G));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t j = r0 + r;
    const auto* row = static_cast<const uint8_t*>(a.w) + j * rb;
    const float* scales = row_scales(a.scales, a.scale_dtype, j, G, sbuf.data());
    const float* mins = a.mins ? row_scales(a.mins, a.scale_dtype, j, G, mbuf.data()) : nullptr;
    float* o = out + r * a.k;
    for (int64_t g = 0; g < G; ++g) {
      const int64_t k0 = g * a.group, len = std::min(a.group, a.k - k0);
      const float scale = scales[g];
      if (a.w_dtype == DType::i8) {
        const auto* q = reinterpret_cast<const int8_t*>(row) + k0;
        for (int64_t i = 0; i < len; ++i) o[k0 + i] = scale * static_cast<float>(q[i]);
      } else {
        const float off = mins ? mins[g] : -8.0f * scale;
        for (int64_t i = 0; i < len; ++i) o[k0 + i] = scale * static_cast<float>(ops::unpack_u4(row, k0 + i)) + off;
      }
    }
  }
}

void linear_q_panels(const QLinearArgs& a) {
  float beta = 0;
  if (a.bias) {
    parallel_for(a.m, 64, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) std::copy(a.bias, a.bias + a.n, a.y + i * a.n);
    });
    beta = 1;
  }
  const int64_t panel = half_panel_rows(a.n, a.k);
  Scratch<float> buf(panel * a.k);
  for (int64_t n0 = 0; n0 < a.n; n0 += panel) {
    const int64_t rows = std::min(panel, a.n - n0);
    parallel_for(rows, 16, [&](int64_t lo, int64_t hi) { dequantize_rows(a, n0 + lo, hi - lo, buf.data() + lo * a.k); });
    sgemm(false, true, a.m, rows, a.k, 1.0f, a.x, a.k, buf.data(), a.k, beta, a.y + n0, a.n);
  }
}

template <const QDots& D>
void linear_q_gemv(const QLinearArgs& a) {
  const int64_t G = (a.k + a.group - 1) / a.group, rb = row_bytes(a);
  const bool int8 = a.w_dtype == DType::i8;
  // Σ x over each group of each row: the code offsets' share.
  std::vector<float> xsum(int8 ? 0 : a.m * G);
  for (int64_t i = 0; !int8 && i < a.m; ++i)
    for (int64_t g = 0; g < G; ++g) {
      const int64_t k0 = g * a.group, len = std::min(a.group, a.k - k0);
      float s = 0;
      for (int64_t p = 0; p < len; ++p) s += a.x[i * a.k + k0 + p];
      xsum[i * G + g] = s;
    }
  // The SIMD rows take groups of whole 32-code blocks; other group sizes run the portable row.
  const auto row_u4 = a.group % 32 == 0 ? D.row_u4 : &portable::row_u4;
  parallel_for(a.n, 16, [&](int64_t lo, int64_t hi) {
    std::vector<float> sbuf(static_cast<size_t>(G)), mbuf(static_cast<size_t>(G));
    for (int64_t j = lo; j < hi; ++j) {
      const auto* row = static_cast<const uint8_t*>(a.w) + j * rb;
      const float* scales = row_scales(a.scales, a.scale_dtype, j, G, sbuf.data());
      const float* mins = a.mins ? row_scales(a.mins, a.scale_dtype, j, G, mbuf.data()) : nullptr;
      for (int64_t i = 0; i < a.m; ++i) {
        const float* x = a.x + i * a.k;
        float s = a.bias ? a.bias[j] : 0.0f;
        if (int8) {
          s += scales[0] * D.dot_i8(x, reinterpret_cast<const int8_t*>(row), a.k);
        } else {
          s += row_u4(x, row, scales, a.k, a.group);
          for (int64_t g = 0; g < G; ++g)  // the code offsets: + lo (asymmetric) or - 8 · scale
            s += (mins ? mins[g] : -8.0f * scales[g]) * xsum[i * G + g];
        }
        a.y[i * a.n + j] = s;
      }
    }
  });
}

template <const QDots& D>
void linear_q_kernel(const QLinearArgs& a) {
  if (a.m <= kGemvMaxRows) return linear_q_gemv<D>(a);
  linear_q_panels(a);
}

// At avx512_bf16 and above (VNNI), with int8 activations when the args allow it: the int4 decode
// GEMV, and the int8/int4 GEMM. (int8 decode keeps f32 activations: bench/quant.md.)
void linear_q_kernel_vnni(const QLinearArgs& a) {
  if (a.m <= kGemvMaxRows ? avx512_bf16::linear_q_u4_vnni(a) : avx512_bf16::linear_q_gemm_vnni(a)) return;
  linear_q_kernel<avx512::kQDots>(a);
}

constexpr QDots kPortableDots{&portable::dot_i8, &portable::row_u4};

}  // namespace

void register_linear_q() {
  auto& reg = kernel_registry();
  ops::QLinearKernel* k = by_level(&linear_q_kernel<kPortableDots>, &linear_q_kernel<avx2::kQDots>,
                                   &linear_q_kernel<avx512::kQDots>);
  const bool vnni = isa_at_least(IsaLevel::avx512_bf16);
  reg.add<ops::QLinearKernel>("linear_q", DeviceKind::cpu, DType::i8, vnni ? &linear_q_kernel_vnni : k, "",
                              vnni ? "avx512_vnni" : level_label());
  reg.add<ops::QLinearKernel>("linear_q", DeviceKind::cpu, DType::u4x2, vnni ? &linear_q_kernel_vnni : k, "",
                              vnni ? "avx512_vnni" : level_label());
}

}  // namespace unillm::cpu
