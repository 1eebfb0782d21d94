// linear: y = x · Wᵀ (+ b). x is f32 or f64 [.., K]; W is [N, K] in f32, bf16 or f16 (f64 only with
// f64 x); b (optional) is f32/f64 [N]. y is x's dtype [.., N]. Low-precision weights are converted
// to f32 while packing; accumulation is f32. Kernel key dtype = W's dtype.
// Backward (recorded when x, W or b needs grad; only the needed gradients are computed):
//   dx = dy · W   [.., K], x's dtype
//   dW = dyᵀ · x  [N, K], f32 for f32/bf16/f16 W (master gradient), f64 for f64 W
//   db = Σ_rows dy [N], b's dtype
// A frozen W (no requires_grad) costs no weight-gradient GEMM (LoRA relies on this).
// OutputUse::kGradOnly: the caller discards y's value and keeps only its backward node (a
// recompute re-run, nn/recompute.h); the forward GEMM is skipped and y is zeros of y's shape.
#pragma once

#include "core/tensor.h"

namespace unillm::ops {

struct LinearArgs {
  const void* x;  // [M, K] row-major, dtype x_dtype
  const void* w;  // [N, K] row-major, dtype w_dtype
  const void* bias;  // [N] or nullptr, dtype x_dtype
  void* y;  // [M, N] row-major, dtype x_dtype (overwritten)
  int64_t m, k, n;
  DType x_dtype, w_dtype;
};
using LinearKernel = void(const LinearArgs&);

// Gradients of linear; each output pointer may be nullptr (not needed) and is overwritten.
struct LinearBackwardArgs {
  const void* dy;  // [M, N], dtype x_dtype
  const void* x;  // [M, K], dtype x_dtype (read only when dw is set)
  const void* w;  // [N, K], dtype w_dtype (read only when dx is set)
  void* dx;  // [M, K], dtype x_dtype
  void* dw;  // [N, K], f32 (f64 when w_dtype is f64)
  void* db;  // [N], dtype x_dtype
  int64_t m, k, n;
  DType x_dtype, w_dtype;
};
using LinearBackwardKernel = void(const LinearBackwardArgs&);

// Whether the caller reads an op's output value or only backpropagates through it. Backward of a
// linear layer reads x and W, never y, so a graph-only call can skip the output GEMM.
enum class OutputUse { kValue, kGradOnly };

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias = Tensor(),
              OutputUse use = OutputUse::kValue);
// Naive triple loop with double accumulation: the fallback and the tests' second opinion.
void linear_reference(const LinearArgs& a);
void linear_backward_reference(const LinearBackwardArgs& a);

}  // namespace unillm::ops
