// swiglu: out = silu(gate) * up, from the fused gate/up projection output. gate_up f32/f64
// [.., 2F] holds gate in [.., :F] and up in [.., F:]; out [.., F].
#pragma once

#include "core/tensor.h"

namespace unillm::ops {

struct SwigluArgs {
  const void* gate_up;  // [rows, 2F]
  void* out;  // [rows, F]
  int64_t rows, ffn;
  DType dtype;
};
using SwigluKernel = void(const SwigluArgs&);

Tensor swiglu(const Tensor& gate_up);
void swiglu_reference(const SwigluArgs& a);

}  // namespace unillm::ops
