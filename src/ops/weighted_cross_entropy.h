// weighted_cross_entropy: the fused lm_head + cross-entropy with one weight per token, computed
// from that token's own logits in the same chunked pass (LLaMA-Factory's SFT loss variants,
// docs/training.md "SFT loss variants"). With CE_i = logsumexp(x_i·Wᵀ) − x_i·w_{label_i}:
//   loss_sum = Σ over labelled rows i of weight_i · CE_i
//   DFT  (use_dft_loss):  weight_i = exp(−CE_i), the probability of the label
//   EAFT (use_eaft_loss): weight_i = (H_k(x_i·Wᵀ) / 3)^alpha, H_k the entropy of the softmax over
//                         the row's k = min(top_k, V) largest logits
// The weights are constants for the gradient (LLaMA-Factory computes them under no_grad), so the
// backward is linear_cross_entropy's with labelled row i scaled by weight_i. The [N, V] logits
// never exist.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace unillm::ops {

struct TokenWeighting {
  enum class Kind { kDft, kEaft } kind = Kind::kDft;
  double alpha = 1.0;      // EAFT's exponent
  int64_t top_k = 20;      // EAFT's entropy window (LLaMA-Factory: 20)
  int64_t chunk_rows = 0;  // as linear_cross_entropy (0: auto)
};

struct WeightedCrossEntropy {
  Tensor loss_sum;             // scalar, x's dtype, on x's device; differentiable w.r.t. x and W
  int64_t count = 0;           // labelled rows
  std::vector<double> weight;  // [N] each row's weight (0 for ignored rows)
  double ce_sum = 0;           // Σ CE_i, the unweighted loss (for logging beside the weighted one)
};

// x, W and labels as linear_cross_entropy (x f32 [N, C] with W f32/bf16/f16, or f64 with f64;
// labels i32 [N] on the CPU, shifted by the caller, −100 = not scored). Backward: dx [N, C] in
// x's dtype, dW [V, C] f32 (f64 for f64 W), overwritten, only those needed.
WeightedCrossEntropy weighted_cross_entropy(const Tensor& x, const Tensor& w, const Tensor& labels,
                                            const TokenWeighting& how);

}  // namespace unillm::ops
