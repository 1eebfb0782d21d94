// bitsandbytes' 4-bit weight formats (nf4, fp4) for QLoRA: their level tables, blockwise
// quantisation with optional double quantisation of the block scales, and the linear product
// over them (ops::linear_q dispatches here for QuantType::nf4/fp4).
//
// Semantics (bitsandbytes' functional.quantize_4bit / dequantize_4bit, written from its source):
//   The weight is flattened (row-major [N, K] → N·K values) and cut into blocks of `blocksize`
//   (64) consecutive values; a block may span two rows when K is not a multiple of it, the last
//   block may be shorter. Per block absmax = max|w|; each value is scaled by the reciprocal,
//   s = clamp(w · (1 / absmax), −1, 1) in f32, and its code is the index of the nearest of the
//   16 levels (|s − level| in f32, the first of equals: torch.argmin over the table, as bnb's
//   portable kernel). Values: level[code] · absmax. A block of zeros gets the code of 0.0.
//   Packing: two codes a byte in flat order, the EVEN element in the HIGH nibble (bnb's
//   `packed = q[::2] << 4 | q[1::2]`); an odd count pads a zero code.
//   nf4 levels: bnb's published NF4 table (normal quantiles normalised to [−1, 1]).
//   fp4 levels: bnb's get_4bit_type("fp4") = [0, 0.0625, 8, 12, 4, 6, 2, 3, −0, ...] / 12 (sign
//   bit 8, e2m1 with bnb's bias), the exact fractions its CUDA kernels use.
//   Double quantisation (bnb's compress_statistics, LLaMA-Factory's double_quantization):
//   offset = mean(absmax); the centred absmaxes are quantised blockwise (blocks of 256) to 8
//   bits with bnb's dynamic map (create_dynamic_map(signed=True, 7, 8)): per 256-block scale
//   a2 = max|absmax − offset|, code = nearest map value to (absmax − offset) · (1 / a2).
//   Decoded absmax = map[code] · a2 + offset (f32), which the 4-bit values then use.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "core/tensor.h"
#include "ops/quant.h"

namespace unillm::ops {

constexpr int64_t kBnbBlocksize = 64;         // bnb's default 4-bit blocksize
constexpr int64_t kBnbAbsmaxBlocksize = 256;  // double quantisation's blocksize

// The 16 levels of nf4 or fp4 (index = code).
const std::array<float, 16>& levels_4bit(QuantType t);
// bnb's 8-bit signed dynamic map (256 ascending values in [−1, 1]).
const std::array<float, 256>& dynamic_map();
// Nearest level's code for s in [−1, 1] (first of equal distances).
int nearest_4bit_code(float s, QuantType t);
// Nearest dynamic-map index for s in [−1, 1] (first of equal distances).
int nearest_dynamic_code(float s);

struct Quant4bitOptions {
  int64_t blocksize = kBnbBlocksize;
  bool double_quant = true;
};

// Quantises w (f32, bf16 or f16 [N, K]) to nf4 or fp4 with the semantics above; the result
// lives on w's device (computed on the host).
QuantizedWeight quantize_4bit(const Tensor& w, QuantType t, const Quant4bitOptions& o);
// The f32 per-block absmaxes [B] (decoded from the double quantisation when present), host.
Tensor block_absmax(const QuantizedWeight& q);
// Code of flat element i of bnb-packed bytes.
inline int code_4bit_at(const uint8_t* packed, int64_t i) {
  return (packed[i >> 1] >> ((i & 1) ? 0 : 4)) & 0xf;
}

// For ops/quant.cpp: QuantizedWeight's check, dequantisation and linear_q for nf4/fp4.
void check_4bit(const QuantizedWeight& q, const std::string& what);
Tensor dequantize_4bit(const QuantizedWeight& q);
Tensor linear_4bit(const Tensor& x, const QuantizedWeight& w, const Tensor& bias);

// The kernel's arguments ("linear_4bit", key: u4x2). Forward (transpose_w = false):
// y [M, N] = x [M, K] · Wᵀ (+ bias); backward (transpose_w = true): y [M, K] = x [M, N] · W
// (dX = dY · W). W [N, K] is level[code] · absmax[block], dequantised a panel of rows at a time
// (never the whole matrix). y is overwritten.
struct Linear4bitArgs {
  const float* x;
  const uint8_t* codes;   // bnb-packed, ceil(N·K / 2) bytes
  const float* absmax;    // [B] decoded
  const float* levels;    // 16 (host memory: the static table)
  const float* bias;      // [N] or nullptr (forward only)
  float* y;
  int64_t m, k, n, blocksize;
  bool transpose_w;
};
using Linear4bitKernel = void(const Linear4bitArgs&);
// Dequantises each W value and accumulates in double: the fallback and the tests' reference.
void linear_4bit_reference(const Linear4bitArgs& a);

}  // namespace unillm::ops
