// CPU linear_4bit (bitsandbytes nf4/fp4, ops/quant_4bit.h): panels of W rows are dequantised
// into f32 (level[code] · block absmax) and multiplied by the f32 GEMM, in both directions:
// forward y = x · Wᵀ (+ b), backward dx = dy · W. A panel is half_panel_rows(N, K) rows, so W is
// never expanded whole (QLoRA's point: the frozen base stays at ~4.5 bits a weight).
#include <algorithm>

#include "backends/cpu/gemm/provider.h"
#include "backends/cpu/kernels/register_kernels.h"
#include "backends/cpu/scratch.h"
#include "backends/cpu/simd/convert.h"
#include "core/parallel.h"
#include "core/registry.h"
#include "ops/quant_4bit.h"

namespace unillm::cpu {
namespace {

using ops::Linear4bitArgs;

// Rows [r0, r0 + rows) of W into out [rows, K]. A flat run of W inside one block shares its
// absmax; each byte holds two codes (even element in the high nibble).
void dequantize_rows_4bit(const Linear4bitArgs& a, int64_t r0, int64_t rows, float* out) {
  const int64_t begin = r0 * a.k, end = (r0 + rows) * a.k;
  for (int64_t i = begin; i < end;) {
    const int64_t b = i / a.blocksize, stop = std::min(end, (b + 1) * a.blocksize);
    const float s = a.absmax[b];
    float lut[16];
    for (int c = 0; c < 16; ++c) lut[c] = a.levels[c] * s;
    if (i % 2 == 1 && i < stop) out[i - begin] = lut[ops::code_4bit_at(a.codes, i)], ++i;
    for (; i + 1 < stop; i += 2) {  // whole bytes: high nibble first
      const uint8_t byte = a.codes[i >> 1];
      out[i - begin] = lut[byte >> 4];
      out[i + 1 - begin] = lut[byte & 15];
    }
    if (i < stop) out[i - begin] = lut[ops::code_4bit_at(a.codes, i)], ++i;
  }
}

void linear_4bit_kernel(const Linear4bitArgs& a) {
  const int64_t panel = half_panel_rows(a.n, a.k);
  Scratch<float> buf(panel * a.k);
  float beta = 0;
  if (!a.transpose_w && a.bias) {
    parallel_for(a.m, 64, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) std::copy(a.bias, a.bias + a.n, a.y + i * a.n);
    });
    beta = 1;
  }
  for (int64_t n0 = 0; n0 < a.n; n0 += panel) {
    const int64_t rows = std::min(panel, a.n - n0);
    // Row chunks of whole blocks' worth are independent: each thread writes its own rows.
    parallel_for(rows, 16, [&](int64_t lo, int64_t hi) {
      dequantize_rows_4bit(a, n0 + lo, hi - lo, buf.data() + lo * a.k);
    });
    if (a.transpose_w) {  // dx [M, K] (+)= dy[:, n0:n0+rows] · W_panel
      sgemm(false, false, a.m, a.k, rows, 1.0f, a.x + n0, a.n, buf.data(), a.k, n0 == 0 ? 0.0f : 1.0f, a.y, a.k);
    } else {  // y[:, n0:n0+rows] = x · W_panelᵀ
      sgemm(false, true, a.m, rows, a.k, 1.0f, a.x, a.k, buf.data(), a.k, beta, a.y + n0, a.n);
    }
  }
}

}  // namespace

void register_linear_4bit() {
  kernel_registry().add<ops::Linear4bitKernel>("linear_4bit", DeviceKind::cpu, DType::u4x2, &linear_4bit_kernel,
                                               "", "portable");
}

}  // namespace unillm::cpu
