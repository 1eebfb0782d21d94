// Weight-only quantised linear layers (docs/ARCHITECTURE.md, "Inference export and quantised
// weights"): a frozen [N, K] weight stored as int8 or int4 codes with f32 scales, in the layout
// the kernels read, and linear_q, which multiplies f32 activations by it.
//
// Formats (w: one weight, q: its code; a row is cut into groups of `group` along K, the last one
// shorter when group does not divide K; rounding is to nearest, ties to even):
//   int8 (PaddleNLP weight_only_int8): group = K (one scale per output row), symmetric:
//     scale = max|w| / 127, q = clamp(round(w / scale), -127, 127), w ≈ scale · q.
//   int4 symmetric: c = clamp(round(w / scale), -8, 7) + 8, w ≈ scale · (c - 8).
//   int4 asymmetric: c = clamp(round((w - lo) / scale), 0, 15), w ≈ scale · c + lo (lo kept in
//     `mins`).
//   The int4 scale (and lo) start at max|w| / 7 (symmetric), or for asymmetric codes at each of
//   9 ranges [min + a·(max − min), max − b·(max − min)], a, b ∈ {0, 0.05, 0.1}; each start then
//   alternates a least-squares refit of scale (and lo) to its codes with re-rounding, up to 20
//   times while the group's squared error falls; the lowest error wins. The codes stay
//   round-to-nearest for the final scale (on stories260K this took int4 g32 asymmetric from
//   +9.4 % perplexity with plain min/max to +6.9 %; docs/export.md).
// A group of zeros (scale 0) has code 0 (int8), 8 (int4 symmetric) or 0 with lo = its value
// (asymmetric): it dequantises exactly.
//   nf4 / fp4 (bitsandbytes' 4-bit, QLoRA; ops/quant_4bit.h has the tables and the layout):
//     blocks of `group` (bnb's blocksize, 64) consecutive elements of the FLATTENED weight, one
//     absmax per block, code = the nearest of 16 fixed levels to w / absmax; optionally the
//     absmaxes themselves quantised to 8 bits (bnb's double quantisation).
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace unillm::ops {

enum class QuantType : uint8_t { int8, int4, nf4, fp4 };

// "weight_only_int8" / "weight_only_int4" (PaddleNLP's --quant_type; also "int8"/"int4").
// Throws ConfigError naming the spelling otherwise.
QuantType quant_type_from_name(const std::string& name);
const char* quant_type_name(QuantType t);  // "weight_only_int8" / "weight_only_int4" / "nf4" / "fp4"
inline bool is_bnb_4bit(QuantType t) { return t == QuantType::nf4 || t == QuantType::fp4; }

struct QuantizedWeight {
  QuantType type = QuantType::int8;
  bool symmetric = true;  // int8 always; int4 either
  int64_t n = 0, k = 0, group = 0;  // group = k for int8
  Tensor data;    // int8: i8 [N, K]; int4: u4x2 [N, ceil(K / 2)], even k in the low nibble;
                  // nf4/fp4: u4x2 [ceil(N·K / 2)] flat, bnb's bytes (even element: HIGH nibble)
  Tensor scales;  // f32 or f16 [N, G], G = ceil(K / group); nf4/fp4: f32 [B] absmax per block
                  // (B = ceil(N·K / group)), or with double quantisation f32 [ceil(B / 256)]
  Tensor mins;    // [N, G] of the scales' dtype for asymmetric int4, else undefined
  // nf4/fp4 double quantisation: the block absmaxes minus their mean, as bnb's 8-bit dynamic
  // codes (i8 [B] holding u8 indices into ops::dynamic_map()) in blocks of 256 with `scales`;
  // undefined without double quantisation.
  Tensor absmax_codes;
  float absmax_offset = 0;  // the mean added back (double quantisation)

  bool defined() const { return data.defined(); }
  int64_t groups() const { return group > 0 ? (k + group - 1) / group : 0; }
  size_t bytes() const;  // data + scales + mins (+ absmax codes and offset)
  // Throws ShapeError/DTypeError naming `what` when the tensors disagree with n, k, group and
  // the type (a bundle whose files do not fit its config).
  void check(const std::string& what) const;
};

// Quantises w (f32, bf16 or f16 [N, K], any device: computed on the CPU) with the formulas
// above. group is ignored for int8; for int4 it must be positive (32, 64 and 128 are usual);
// nf4/fp4 take it as the blocksize (symmetric ignored, no double quantisation: see
// ops::quantize_4bit for that). scale_dtype (int8/int4: f32 or f16) is how scales and mins are
// stored; with f16 each group's fitted scale and min are rounded to f16 before its codes are
// chosen, so the codes are the nearest for the stored values. A scale or min beyond f16's range
// is a ConfigError naming `what`.
QuantizedWeight quantize_weight(const Tensor& w, QuantType type, int64_t group, bool symmetric,
                                DType scale_dtype = DType::f32, const std::string& what = "weight");
// f32 or f16, else a ConfigError naming the spelling ("f16"/"float16", "f32"/"float32").
DType scale_dtype_from_name(const std::string& name);
// The f32 [N, K] the codes stand for (on q's device).
Tensor dequantize_weight(const QuantizedWeight& q);

// y = x · Wᵀ (+ b) for f32 x [.., K] and a quantised W; y f32 [.., N]. Backward: dx = dy · W
// (W dequantised; W and its codes are frozen), db = Σ dy when b requires grad.
Tensor linear_q(const Tensor& x, const QuantizedWeight& w, const Tensor& bias = Tensor());

// The kernel's arguments (key: the data dtype, i8 or u4x2).
struct QLinearArgs {
  const float* x;  // [M, K]
  const void* w;  // codes (QuantizedWeight::data)
  const void* scales;  // [N, G] of scale_dtype
  const void* mins;  // [N, G] of scale_dtype, or nullptr (symmetric)
  const float* bias;  // [N] or nullptr
  float* y;  // [M, N] (overwritten)
  int64_t m, k, n, group;
  DType w_dtype;
  // The kernel may quantise x to int8 (per block of 32, scale max|x| / 127) and multiply codes
  // by codes (VNNI) where the CPU has it: linear_q_int8_activations(), outside grad mode only
  // (inference; a training forward, e.g. QLoRA's over an int8 base, stays the exact product its
  // backward differentiates).
  bool int8_activations = false;
  DType scale_dtype = DType::f32;  // of scales and mins: f32 or f16
};

// Whether linear_q lets kernels quantise the activations to int8 (default on: on CPUs with
// AVX512-VNNI it makes the int4 decode GEMV several times cheaper, within the quality bound of
// docs/export.md). Tests that compare against an exact product turn it off.
bool linear_q_int8_activations();
void set_linear_q_int8_activations(bool on);
using QLinearKernel = void(const QLinearArgs&);
// Dequantises each row of W and accumulates in double: the fallback and the tests' reference.
void linear_q_reference(const QLinearArgs& a);
// Code j of row r of a u4x2 matrix with row stride `row_bytes`.
inline int unpack_u4(const uint8_t* row, int64_t j) { return (row[j >> 1] >> ((j & 1) * 4)) & 0xf; }

}  // namespace unillm::ops
