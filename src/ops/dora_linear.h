// dora_delta: one DoRA adapter's share of a (fused) linear layer's output, PEFT 0.13's
// DoraLinearLayer.forward. For each targeted part p (its rows W_p of W, its A_p, B_p, magnitude m_p):
//   x̃_p = drop_p(x) (the same per-part masks as lora_linear's, ops/lora_linear.h)
//   n_p = ‖W_p + s·B_p·A_p‖ per output row, detached (no gradient flows through it; the paper's
//         §4.3 and PEFT), g_p = m_p / n_p
//   y[:, cols_p] = (g_p − 1) ⊙ (x̃_p·W_pᵀ) + g_p ⊙ s·(x̃_p·A_pᵀ)·B_pᵀ
// zeros in the columns of untargeted parts. The caller adds it to the base output x·Wᵀ + b (which
// uses the undropped x, as PEFT's base_layer(x) does); without dropout the sum is g ⊙ (W + sBA)x + b.
// Shapes: x [.., K] f32/f64; W [N, K] any float dtype (frozen: a W that requires grad is refused);
// A [P·r, K], B [Σ cols, r], m [Σ cols] in x's dtype, B's row order. CPU only.
// Backward (fresh tensors, overwritten): with dy_p the part's columns of dy,
//   dm_p = Σ_rows dy_p ⊙ (x̃_p·W_pᵀ + s·x̃_p·A_pᵀ·B_pᵀ) / n_p
//   dB_p = s·(g ⊙ dy_p)ᵀ·(x̃_p·A_pᵀ);  dA_p = s·((g ⊙ dy_p)·B_p)ᵀ·x̃_p
//   dx  += mask_p( s·((g ⊙ dy_p)·B_p)·A_p + ((g − 1) ⊙ dy_p)·W_p )
// OutputUse::kGradOnly: y is zeros (the node is recorded all the same).
#pragma once

#include <vector>

#include "core/tensor.h"
#include "ops/lora_linear.h"

namespace unillm::ops {

struct DoraInput {
  LoraAdapterInput lora;  // A, B, parts, scaling, dropout, seed, rows (rows: inference only)
  Tensor magnitude;       // [Σ cols] in x's dtype
};

Tensor dora_delta(const Tensor& x, const Tensor& w, const DoraInput& in,
                  OutputUse use = OutputUse::kValue);

// ‖W_p + s·B_p·A_p‖ of every output row of every part, in B's row order: [Σ cols] f64 (summed
// in f64 from W's values and an f64 B·A). With B = 0 it is ‖W‖'s rows: DoRA's initial magnitude.
Tensor dora_row_norms(const Tensor& w, const LoraAdapterInput& ad);

}  // namespace unillm::ops
