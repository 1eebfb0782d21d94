// add_rms_norm: a residual add and the RMSNorm that reads its result, in one pass over each row
// (the fuse_residual_rms_norm inference pass):
//   sum = x + delta;   y = rms_norm(sum, w, eps)
// x, delta f32 [.., C] of one shape; w [C] f32/bf16/f16. Returns both: sum continues the residual
// stream, y feeds the next block. The kernels form each row's sum and then normalise it exactly
// as ops::add and ops::rms_norm do, so the values equal the unfused pair.
// Gradients, f64, and devices without an "add_rms_norm" kernel take the composed ops (ops::add
// then ops::rms_norm), which carry the backward; the fused kernel is a forward-only fast path.
#pragma once

#include "core/tensor.h"

namespace unillm::ops {

struct AddRmsNormArgs {
  const float* x;  // [rows, dim]
  const float* delta;  // [rows, dim]
  const void* w;  // [dim], dtype w_dtype
  float* sum;  // [rows, dim]
  float* y;  // [rows, dim]
  int64_t rows, dim;
  float eps;
  DType w_dtype;
};
using AddRmsNormKernel = void(const AddRmsNormArgs&);

struct AddRmsNormResult {
  Tensor sum, y;
};

AddRmsNormResult add_rms_norm(const Tensor& x, const Tensor& delta, const Tensor& w, float eps);
void add_rms_norm_reference(const AddRmsNormArgs& a);

}  // namespace unillm::ops
