// linear: y = x · Wᵀ (+ b). x is f32 or f64 [.., K]; W is [N, K] in f32, bf16 or f16 (f64 only with
// f64 x); b (optional) is f32/f64 [N]. y is x's dtype [.., N]. Low-precision weights are converted
// to f32 while packing; accumulation is f32. Kernel key dtype = W's dtype.
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

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias = Tensor());
// Naive triple loop with double accumulation: the fallback and the tests' second opinion.
void linear_reference(const LinearArgs& a);

}  // namespace unillm::ops
