// A marker in the graph that tells when backward has passed it: identity in the forward; in
// backward it runs after every op that read the marked tensors has run its backward (the engine's
// reverse topological order), calls fn, and passes the gradients on unchanged. Data parallelism
// uses it to start a decoder layer's gradient reduction as soon as backward has left the layer
// (train/grad_buckets.h).
#pragma once

#include <functional>
#include <vector>

#include "core/tensor.h"

namespace unillm::autograd {

// Returns xs (undefined entries stay undefined), marked when grad mode is on and one of them
// requires grad; otherwise xs themselves, and fn is never called.
std::vector<Tensor> on_backward(const std::vector<Tensor>& xs, std::function<void()> fn);

}  // namespace unillm::autograd
