// The backward engine: runs nodes in reverse topological order from a root, summing gradients
// that reach a node from several paths, and accumulating (+=) into leaves' .grad.
#pragma once

#include "core/tensor.h"

namespace unillm::autograd {

struct BackwardOptions {
  bool retain_graph = false;
};

// Backpropagates grad_output (same shape as root; default: ones for a scalar root). Leaves'
// .grad is accumulated (+=; created as a fresh tensor on first use); gradients meeting at a node
// are summed into fresh tensors. Runs with grad mode off. Without retain_graph, each node's saved
// tensors are released after its backward, so a second backward through the graph throws.
// Re-entrant: a node's backward() may itself call backward() on a separate sub-graph (per-layer
// recompute: re-run the layer's forward under GradModeGuard(true) on detached inputs that
// require grad, then backward through it and return those inputs' .grad).
void backward(const Tensor& root, const Tensor& grad_output = Tensor(),
              const BackwardOptions& options = {});

// dst += src for CPU float tensors of the same shape (used for gradient accumulation).
void accumulate(Tensor& dst, const Tensor& src);

}  // namespace unillm::autograd
