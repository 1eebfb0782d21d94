// gather_rows: out[i] = x[idx[i]] for a 2-D x [N, C] and i32 idx [M] -> [M, C]. Used to compute
// the lm_head only for the positions whose logits are needed. Any dtype and device (rows are copied
// through the backend); idx must be on the CPU and in [0, N).
#pragma once

#include "core/tensor.h"

namespace unillm::ops {

Tensor gather_rows(const Tensor& x, const Tensor& idx);

}  // namespace unillm::ops
