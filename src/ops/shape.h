// Differentiable shape ops: reshape (a view when contiguous), split of the last dim into
// parts (the q/k/v and gate/up outputs of fused projections), and row blocks split and joined. Plain Tensor::view/slice carry
// no autograd history; use these on tensors that need gradients.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace unillm::ops {

// x reshaped to shape (-1 infers one dim); gradient reshaped back.
Tensor reshape(const Tensor& x, const Shape& shape);
// x [.., S] → parts [.., sizes[i]] (contiguous copies), Σ sizes = S. Backward concatenates
// the parts' gradients (zeros for parts without one).
std::vector<Tensor> split_last(const Tensor& x, const std::vector<int64_t>& sizes);
// x [M, ..] → row blocks [sizes[i], ..] (contiguous copies), Σ sizes = M; backward concatenates
// the blocks' gradients (zeros for blocks without one). A mixture-of-experts layer's experts.
std::vector<Tensor> split_rows(const Tensor& x, const std::vector<int64_t>& sizes);
// xs[i] [M_i, ..] (same trailing shape, dtype and device) → [Σ M_i, ..]; backward splits.
Tensor concat_rows(const std::vector<Tensor>& xs);

}  // namespace unillm::ops
