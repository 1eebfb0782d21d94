// Per-layer recompute (gradient checkpointing): run a layer without keeping its activations and
// re-run its forward inside backward, with grad enabled, to get its gradients. Only the layer's
// input is saved. Parameter gradients accumulate (+=) during that nested backward.
#pragma once

#include <functional>

#include "core/tensor.h"

namespace unillm::nn {

using LayerFn = std::function<Tensor(const Tensor&)>;

// Returns fn(x). When grad is enabled and x or the layer's parameters need gradients
// (params_need_grad), the forward runs under no-grad and a recompute node is recorded.
Tensor recompute(const LayerFn& fn, const Tensor& x, bool params_need_grad);

}  // namespace unillm::nn
