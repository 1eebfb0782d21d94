// gather_rows: out[i] = x[idx[i]] for a 2-D x [N, C] and i32 idx [M] -> [M, C]. Used to compute
// the lm_head only for the positions whose logits are needed. Any dtype and device (rows are copied
// through the backend); idx must be on the CPU and in [0, N).
// Backward (f32/f64 x only): dx [N, C] = scatter-add of dout's rows by idx (repeated indices sum).
// scatter_add_rows is also embedding's backward.
#pragma once

#include "core/tensor.h"

namespace unillm::ops {

Tensor gather_rows(const Tensor& x, const Tensor& idx);

// dst[r] = Σ_{i : idx[i] = r} src[i] for every r < rows (dst is overwritten, rows never indexed are
// zero). Deterministic: each dst row sums its sources in increasing i. Kernel key = dtype (f32/f64).
struct ScatterRowsArgs {
  const int32_t* idx;  // [m], each in [0, rows) (checked by the op)
  const void* src;  // [m, dim]
  void* dst;  // [rows, dim] (overwritten)
  int64_t m, rows, dim;
  DType dtype;
};
using ScatterRowsKernel = void(const ScatterRowsArgs&);

void scatter_add_rows_reference(const ScatterRowsArgs& a);
// Allocates dst [rows, C] of src's dtype (f32/f64, CPU idx) and runs the kernel (or the reference).
Tensor scatter_add_rows(const Tensor& src, const Tensor& idx, int64_t rows);

}  // namespace unillm::ops
