// softmax over the last dim, numerically stable (max subtracted). x f32/f64 [.., N].
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

Tensor softmax(const Tensor& x);
void softmax_reference(const SoftmaxArgs& a);

}  // namespace unillm::ops
