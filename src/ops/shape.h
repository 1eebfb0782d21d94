// Differentiable shape ops: reshape (a view when contiguous) and split of the last dim into
// parts (the q/k/v and gate/up outputs of fused projections). Plain Tensor::view/slice carry
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

}  // namespace unillm::ops
