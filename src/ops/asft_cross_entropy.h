// asft_cross_entropy: LLaMA-Factory's ASFT loss on the fused lm_head + cross-entropy, for the
// policy's hidden states x [N, C] with lm_head W [V, C] and a frozen reference's x_ref [N, C] with
// W_ref [V, C] (docs/finetuning.md "SFT loss variants"). Over labelled rows i, with
// p = softmax(x_i·Wᵀ), q = softmax(x_ref_i·W_refᵀ) and CE_i = −log p(label_i):
//   loss_sum = Σ_i exp(−CE_i)·CE_i + alpha · Σ_i KL(q ‖ p),  KL = Σ_v q_v (log q_v − log p_v)
// (DFT's term with its weight held constant, plus the KL to the reference; LLaMA-Factory's
// asft_loss_func is loss_sum / count). Only x and W get gradients:
//   dlogits_i = exp(−CE_i)·(p − onehot(label_i)) + alpha·(p − q).
// Each chunk's two logit blocks exist once: the gradients are computed in the forward for an
// assumed d(loss_sum) = grad_scale and rescaled in backward (as linear_cross_entropy_eager_grad).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace unillm::ops {

struct AsftCrossEntropy {
  Tensor loss_sum;    // scalar, x's dtype, on x's device; differentiable w.r.t. x and W
  int64_t count = 0;  // labelled rows
  double dft_sum = 0, kl_sum = 0;  // Σ exp(−CE)·CE and Σ KL (loss_sum = dft_sum + alpha·kl_sum)
};

struct AsftOptions {
  double alpha = 0.1;       // asft_alpha (LLaMA-Factory's default)
  double grad_scale = 1.0;  // the d(loss_sum) backward is expected to bring
  int64_t chunk_rows = 0;   // 0: auto, as linear_cross_entropy
};

// x f32 [N, C] with W f32/bf16/f16 (f64 with f64); x_ref [N, C] in x's dtype with W_ref [V, C]
// in any of W's dtypes; labels i32 [N] on the CPU, shifted by the caller, −100 = not scored.
// x_ref and W_ref get no gradient.
AsftCrossEntropy asft_cross_entropy(const Tensor& x, const Tensor& w, const Tensor& x_ref,
                                    const Tensor& w_ref, const Tensor& labels,
                                    const AsftOptions& o);

// Kernel key "asft_cross_entropy" by w's dtype: per labelled row ce[i] and kl[i] (0 for ignored
// rows), and dx / dw (nullptr: not needed; overwritten) for d(loss_sum) = grad_scale.
struct AsftCrossEntropyArgs {
  const void* x;          // [n, c], x_dtype
  const void* w;          // [v, c], w_dtype
  const void* x_ref;      // [n, c], x_dtype
  const void* w_ref;      // [v, c], w_ref_dtype
  const int32_t* labels;  // [n], checked by the op
  double* ce;             // [n] (written)
  double* kl;             // [n] (written)
  double alpha, grad_scale;
  void* dx;  // [n, c], x_dtype, or nullptr
  void* dw;  // [v, c], f32 (f64 for f64 w), or nullptr
  int64_t n, c, v, chunk_rows;
  DType x_dtype, w_dtype, w_ref_dtype;
};
using AsftCrossEntropyKernel = void(const AsftCrossEntropyArgs&);

// The naive double-precision reference (the CPU fallback).
void asft_cross_entropy_reference(const AsftCrossEntropyArgs& a);

}  // namespace unillm::ops
