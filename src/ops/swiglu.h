// swiglu: out = silu(gate) * up, from the fused gate/up projection output. gate_up f32/f64
// [.., 2F] holds gate in [.., :F] and up in [.., F:]; out [.., F].
// Backward (saves gate_up): with s = sigmoid(g), d(gate_up) [.., 2F] in gate_up's dtype holds
//   d_gate = dy·u·s·(1 + g·(1 − s))   and   d_up = dy·g·s.
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

struct SwigluBackwardArgs {
  const void* gate_up;  // [rows, 2F]
  const void* dout;  // [rows, F]
  void* dgate_up;  // [rows, 2F] (overwritten)
  int64_t rows, ffn;
  DType dtype;
};
using SwigluBackwardKernel = void(const SwigluBackwardArgs&);

Tensor swiglu(const Tensor& gate_up);
void swiglu_reference(const SwigluArgs& a);
void swiglu_backward_reference(const SwigluBackwardArgs& a);

}  // namespace unillm::ops
