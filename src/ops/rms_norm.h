// rms_norm: y = x / sqrt(mean(x²) + eps) * w over the last dim (HF LlamaRMSNorm: the normalisation
// in f32, then times the weight). x f32/f64 [.., C], w [C] (f32/bf16/f16, f64 with f64 x).
// y has x's shape and dtype. Kernel key dtype = w's dtype.
// Backward (recomputes the per-row 1/rms from the saved x; r = 1/rms, g = dy):
//   dx = r·(g∘w) − x·r³/C·Σ_c(g∘w∘x)   x's dtype and shape
//   dw = Σ_rows g∘x·r                   [C], f32 for f32/bf16/f16 w (master gradient), f64 for f64
// dw is reduced over rows in fixed per-thread partials (deterministic for a thread count).
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

// Gradients of rms_norm; dx or dw may be nullptr (not needed); both are overwritten.
struct RmsNormBackwardArgs {
  const void* dy;  // [rows, dim], x_dtype
  const void* x;  // [rows, dim], x_dtype
  const void* w;  // [dim], w_dtype
  void* dx;  // [rows, dim], x_dtype
  void* dw;  // [dim], f32 (f64 when w_dtype is f64)
  int64_t rows, dim;
  float eps;
  DType x_dtype, w_dtype;
};
using RmsNormBackwardKernel = void(const RmsNormBackwardArgs&);

Tensor rms_norm(const Tensor& x, const Tensor& w, float eps);
void rms_norm_reference(const RmsNormArgs& a);
void rms_norm_backward_reference(const RmsNormBackwardArgs& a);

}  // namespace unillm::ops
