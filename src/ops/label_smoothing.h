// label_smoothing_term: what Hugging Face's LabelSmoother (label_smoothing_factor = ε) adds to the
// token cross-entropy of a causal LM. HF's per-token loss is (1 − ε) · CE_i + ε · S_i with
// S_i = −(1/V) Σ_v log p_iv; since CE_i = lse_i − z_i,label and S_i = lse_i − mean_v z_iv, that is
//   CE_i + ε · (z_i,label − mean_v z_iv),   z_iv = x_i · w_v.
// This op returns the second part summed over the labelled rows, ε · Σ_i (x_i · w_label_i −
// x_i · w̄) with w̄ the mean row of W, so linear_cross_entropy's loss_sum plus it is HF's smoothed
// loss summed over tokens; the [N, V] logits never exist (O(N·C + V·C)). Its gradient:
// dx_i = g · ε · (w_label_i − w̄), dW_label_i += g · ε · x_i, dW_v −= g · ε / V · Σ_i x_i.
// Computed on the host in double (the result is copied back to x's device).
#pragma once

#include "core/tensor.h"

namespace unillm::ops {

// x f32 [N, C] (any device), W [V, C] f32/bf16/f16, labels i32 [N] on the CPU, shifted by the caller
// (−100 = not scored, else in [0, V)). Returns a scalar of x's dtype on x's device, differentiable
// w.r.t. x and W (dW in f32: the master gradient of a 16-bit W).
Tensor label_smoothing_term(const Tensor& x, const Tensor& w, const Tensor& labels, double epsilon);

}  // namespace unillm::ops
