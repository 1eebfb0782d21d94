// Per-segment recompute (gradient checkpointing): run a segment of a layer without keeping its
// activations and re-run its forward inside backward, with grad enabled, to get its gradients.
// Only the segment's input is saved. Parameter gradients accumulate (+=) during that nested
// backward.
#pragma once

#include <functional>

#include "core/tensor.h"
#include "ops/linear.h"

namespace unillm::nn {

// A segment y = fn(x, use). The forward calls it with kValue. The backward re-run calls it with
// kGradOnly: that run's output value is discarded (only its graph is backpropagated, from the
// incoming gradient), so the segment may skip work whose value no backward node reads. For a
// residual block y = x + proj(f(x)) that is proj's GEMM: linear's backward reads x and W, never
// y, and add's backward reads no values (ops::OutputUse::kGradOnly). Everything else in the
// segment must be computed as usual.
using SegmentFn = std::function<Tensor(const Tensor&, ops::OutputUse)>;

// Returns fn(x, kValue). When grad is enabled and x or the segment's parameters need gradients
// (params_need_grad), the forward runs under no-grad and a recompute node is recorded.
Tensor recompute(const SegmentFn& fn, const Tensor& x, bool params_need_grad);

}  // namespace unillm::nn
