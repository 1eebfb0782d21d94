// softmax over the last dim, numerically stable (max subtracted). x f32/f64 [.., N].
// Backward (saves y): dx = y ∘ (dy − Σ_last(dy ∘ y)), x's dtype.
#pragma once

#include "core/tensor.h"

namespace unillm::ops {

struct SoftmaxArgs {
  const void* x;
  void* y;
  int64_t rows, cols;
  DType dtype;
};
using SoftmaxKernel = void(const SoftmaxArgs&);

struct SoftmaxBackwardArgs {
  const void* y;  // [rows, cols], the forward output
  const void* dy;  // [rows, cols]
  void* dx;  // [rows, cols] (overwritten)
  int64_t rows, cols;
  DType dtype;
};
using SoftmaxBackwardKernel = void(const SoftmaxBackwardArgs&);

Tensor softmax(const Tensor& x);
void softmax_reference(const SoftmaxArgs& a);
void softmax_backward_reference(const SoftmaxBackwardArgs& a);

}  // namespace unillm::ops
