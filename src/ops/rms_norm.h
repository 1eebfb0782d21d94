// rms_norm: y = x / sqrt(mean(x²) + eps) * w over the last dim (HF LlamaRMSNorm: the normalisation
// in f32, then times the weight). x f32/f64 [.., C], w [C] (f32/bf16/f16, f64 with f64 x).
// y has x's shape and dtype. Kernel key dtype = w's dtype.
#pragma once

#include "core/tensor.h"

namespace unillm::ops {

struct RmsNormArgs {
  const void* x;  // [rows, dim]
  const void* w;  // [dim], dtype w_dtype
  void* y;  // [rows, dim]
  int64_t rows, dim;
  float eps;
  DType x_dtype, w_dtype;
};
using RmsNormKernel = void(const RmsNormArgs&);

Tensor rms_norm(const Tensor& x, const Tensor& w, float eps);
void rms_norm_reference(const RmsNormArgs& a);

}  // namespace unillm::ops
