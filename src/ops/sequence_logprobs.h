// sequence_logprobs: per-sequence sums of token log-probabilities through the fused lm_head +
// cross-entropy (the preference stages' log π(y | x); docs/ARCHITECTURE.md, "Preference
// training"). For x [B·T, C] (the final hidden states of B rows of T positions), the lm_head
// W [V, C] and shifted labels [B·T] (position t scored against its label, −100 = not scored):
//   logps[b] = Σ over scored positions i of row b of log softmax(x_i·Wᵀ)[label_i]
//            = −Σ_i loss_i of linear_cross_entropy,
//   tokens[b] = the number of scored positions (LLaMA-Factory's valid_length).
// The [B·T, V] logits never exist: the forward is linear_cross_entropy's kernel (only labelled rows
// meet the lm_head). Backward takes one upstream gradient per sequence, g [B], and runs the
// cross-entropy backward with a scale per row: dlogits_i = (softmax − onehot)·(−g[i / T]).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "ops/cross_entropy.h"

namespace unillm::ops {

struct SequenceLogprobs {
  Tensor logps;  // [B], x's dtype, on x's device; differentiable w.r.t. x and W
  std::vector<double> values;  // the same sums, accumulated in double in position order
  std::vector<int64_t> tokens;  // [B] scored positions per row
};

// x f32 [B·T, C] with W f32/bf16/f16, or f64 with f64; labels i32 [B·T] on the CPU (checked as
// linear_cross_entropy checks them); seq_len = T divides the rows of x (ShapeError otherwise).
// token_weight: empty, or one weight per position: logps[b] = Σ_i weight_i·log p(label_i) (and
// the backward scales row i by weight_i too); tokens still counts the scored positions.
SequenceLogprobs sequence_logprobs(const Tensor& x, const Tensor& w, const Tensor& labels,
                                   int64_t seq_len, int64_t chunk_rows = 0,
                                   const std::vector<double>& token_weight = {});

// The backward kernel with one scale per row (key "linear_cross_entropy_backward_rows" by W's
// dtype): base as LinearCrossEntropyBackwardArgs with base.grad_scale ignored; labelled row i
// gets dlogits = (softmax − onehot)·row_scale[i]. Devices without it run the CPU kernel on host
// copies (no plugin ABI struct: plugins keep their 1.0 cross-entropy kernels).
struct LinearCrossEntropyRowsBackwardArgs {
  LinearCrossEntropyBackwardArgs base;
  const double* row_scale;  // [n], host or device memory as the kernel's other inputs
};
using LinearCrossEntropyRowsBackwardKernel = void(const LinearCrossEntropyRowsBackwardArgs&);
// The naive double-precision reference (the CPU fallback).
void linear_cross_entropy_backward_rows_reference(const LinearCrossEntropyRowsBackwardArgs& a);

}  // namespace unillm::ops
