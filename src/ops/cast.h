// cast: converts a tensor's elements to another floating dtype (no autograd: it is a storage
// conversion, used to keep saved activations in bf16/f16 and to upcast weights). f32 -> bf16/f16
// rounds to nearest even (f16 overflows to ±inf, as torch's .half()); bf16/f16 -> f32 is exact.
// Kernel key = the 2-byte dtype of the pair (one kernel converts both ways); other pairs and
// devices without a kernel use the reference (CPU) conversion.
#pragma once

#include "core/tensor.h"

namespace unillm::ops {

struct CastArgs {
  const void* src;
  DType src_dtype;
  void* dst;
  DType dst_dtype;
  int64_t n;
};
using CastKernel = void(const CastArgs&);

void cast_reference(const CastArgs& a);
// A contiguous tensor of x's shape in dtype `to` (x itself when it already has that dtype).
Tensor cast(const Tensor& x, DType to);

}  // namespace unillm::ops
