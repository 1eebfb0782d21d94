// lora_linear: a (fused) linear layer plus LoRA adapters on some of its row parts, PEFT's
//   y = x · Wᵀ (+ b) + Σ_adapters Σ_parts  y[:, cols_p] += s · (drop_p(x) · A_pᵀ) · B_pᵀ
// computed as one base GEMM, one x · [A_p0; A_p1; …]ᵀ GEMM per adapter (one per part when dropout
// is on: each part draws its own mask, like PEFT's separate q/k/v modules), and one rank-r GEMM
// per part into the column slice of y (BLAS leading dimensions, no copies).
// Shapes: x [.., K] f32/f64; W [N, K] (f32, bf16, f16; f64 with f64 x); b [N] x's dtype or none;
// A [P·r, K] and B [Σ cols_p, r] in x's dtype (part p: A rows [p·r, (p+1)·r), B rows
// [b_row_p, b_row_p + cols_p)). Dropout: mask from the explicit seed (Bernoulli keep 1 − p, kept
// values scaled by 1/(1 − p)); the same seed gives the same mask (recompute relies on that).
// Backward (recorded when anything needs grad; only the needed gradients are computed, all
// overwritten, fresh tensors): dx = dy·W + Σ s·(dy_p·B_p)·A_p (through the mask); dW only when W
// requires grad (a frozen base costs no dW GEMM); db; dA_p = s·(dy_p·B_p)ᵀ·drop_p(x);
// dB_p = s·dy_pᵀ·(drop_p(x)·A_pᵀ).
// OutputUse::kGradOnly (a recompute re-run that discards y, see ops/linear.h): y is zeros; the base
// GEMM and the rank-r GEMMs into y are skipped, drop(x)·Aᵀ (which dB needs) is still computed.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "ops/linear.h"

namespace unillm::ops {

// One targeted part: output columns [col_begin, col_begin + cols) of y, whose B rows start at
// b_row of the adapter's B. Part p uses A rows [p·r, (p+1)·r).
struct LoraPart {
  int64_t col_begin = 0, cols = 0, b_row = 0;
};

struct LoraAdapterInput {
  Tensor a;                     // [P·r, K]
  Tensor b;                     // [Σ cols, r]
  std::vector<LoraPart> parts;  // P parts
  double scaling = 1.0;         // alpha / r (rslora: alpha / sqrt(r))
  double dropout = 0.0;  // probability of zeroing an input element (0: none; pass 0 at inference)
  uint64_t seed = 0;     // dropout stream (part p uses a stream derived from seed and p)
  // Rows of x (tokens) this adapter applies to: [row_begin, row_end), -1 = all. A serving step
  // batches requests for different adapters, each on its own run of rows (the segmented LoRA
  // GEMM); only without gradients.
  int64_t row_begin = 0, row_end = -1;
  // Tensor parallelism's row-parallel layers: x holds input columns [mask_col_begin,
  // mask_col_begin + K) of mask_cols, and each dropout mask is the whole input's cut to them
  // (one process's masks). mask_cols = 0: x is the whole input.
  int64_t mask_col_begin = 0, mask_cols = 0;
  // Sequence / context parallelism: x's rows are rows [mask_row_begin, …) of the call's whole
  // input, and each mask row is that row's (one process's masks).
  int64_t mask_row_begin = 0;
};

Tensor lora_linear(const Tensor& x, const Tensor& w, const Tensor& bias,
                   const std::vector<LoraAdapterInput>& adapters,
                   OutputUse use = OutputUse::kValue);

// The adapters' deltas alone, y [.., n] = Σ_adapters Σ_parts (zeros elsewhere), with the same
// backward for x, A and B (no W, no bias). QLoRA adds it to linear_q's output over a frozen
// quantised base (nn::FusedLinear): the base's own node gives its share of dx.
Tensor lora_delta(const Tensor& x, int64_t n, const std::vector<LoraAdapterInput>& adapters,
                  OutputUse use = OutputUse::kValue);

// Strided row-major GEMM: C[m, n] (ldc) = alpha · op(A) · op(B) + beta · C, op = transpose when
// the flag is set (A is then stored [k, m] with lda, B [n, k] with ldb). f32 or f64 throughout.
struct LoraGemmArgs {
  const void* a;
  const void* b;
  void* c;
  int64_t m, n, k, lda, ldb, ldc;
  bool trans_a, trans_b;
  double alpha, beta;
  DType dtype;
};
using LoraGemmKernel = void(const LoraGemmArgs&);
// Naive loops with double accumulation (the CPU fallback).
void lora_gemm_reference(const LoraGemmArgs& a);
// One such GEMM through the "lora_gemm" kernel (g's pointers point into a, b and c, contiguous
// tensors of g.dtype on one device; c is read when beta ≠ 0). Also the vocabulary-parallel
// cross-entropy's (ops/vocab_parallel_cross_entropy.h).
void strided_gemm(LoraGemmArgs g, const Tensor& a, const Tensor& b, const Tensor& c);

// The dropout mask of one part: keep[i] = 1 with probability 1 − p, drawn from seed (16-bit
// uniforms, one xoshiro stream per row: independent of the thread count); the rows are rows
// [first_row, first_row + rows) of the input's (each row's stream is its index's).
void lora_dropout_mask(uint64_t seed, double p, int64_t rows, int64_t cols, uint8_t* keep, int64_t first_row = 0);
// The mask seed of part `part` of an adapter whose LoraAdapterInput::seed is seed.
uint64_t lora_part_seed(uint64_t seed, size_t part);

}  // namespace unillm::ops
