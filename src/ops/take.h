// take_rows / take_cols: a differentiable copy of a block of a matrix — the row ranges, or the
// column range, one tensor-parallel rank computes with (nn/tensor_parallel.h) out of a weight
// every process holds whole. Any dtype and device (rows copied through the backend, as
// gather_rows). Backward (f32/f64 gradients: a low-precision weight's gradient is f32, ops/linear.h):
// the whole matrix's gradient, zeros outside the block.
#pragma once

#include <utility>
#include <vector>

#include "core/tensor.h"

namespace unillm::ops {

// x [N, K] (or [N]) -> the rows of each range [begin, end), in order: [Σ (end − begin), K].
Tensor take_rows(const Tensor& x, const std::vector<std::pair<int64_t, int64_t>>& ranges);
// x [N, K] -> columns [begin, end): [N, end − begin].
Tensor take_cols(const Tensor& x, int64_t begin, int64_t end);

}  // namespace unillm::ops
