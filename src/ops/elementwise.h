// Elementwise ops on same-shape, same-dtype f32/f64 tensors (residual adds and the like); no
// broadcasting. Kernel keys "add"/"mul" by dtype.
// Backward: add passes dy to both inputs (the same tensor, never written in place); mul saves the
// operands it needs and returns da = dy∘b, db = dy∘a (through the "mul" kernel).
#pragma once

#include "core/tensor.h"

namespace unillm::ops {

struct BinaryArgs {
  const void* a;
  const void* b;
  void* out;
  int64_t n;
  DType dtype;
};
using BinaryKernel = void(const BinaryArgs&);

Tensor add(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
void add_reference(const BinaryArgs& a);
void mul_reference(const BinaryArgs& a);

}  // namespace unillm::ops
