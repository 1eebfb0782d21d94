// The backward engine: runs nodes in reverse topological order from a root, summing gradients
// that reach a node from several paths, and accumulating (+=) into leaves' .grad.
#pragma once

#include "core/tensor.h"

namespace unillm::autograd {

struct BackwardOptions {
  bool retain_graph = false;
};

// Backpropagates grad_output (same shape as root; default: ones for a scalar root).
void backward(const Tensor& root, const Tensor& grad_output = Tensor(),
              const BackwardOptions& options = {});

// dst += src for CPU float tensors of the same shape (used for gradient accumulation).
void accumulate(Tensor& dst, const Tensor& src);

}  // namespace unillm::autograd
