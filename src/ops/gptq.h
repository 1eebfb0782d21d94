// GPTQ (Frantar et al. 2022, "GPTQ: Accurate Post-Training Quantization for Generative
// Pre-trained Transformers"): quantisation of a linear layer's weight that spreads each column's
// rounding error over the columns not yet quantised, weighted by the layer's input statistics,
// so that ‖X·Wᵀ − X·Qᵀ‖ stays small on the calibration inputs X. Same formats and codes as
// ops::quantize_weight (ops/quant.h); only which code each weight gets differs.
//
// hessian: f64 [K, K], Σ over calibration rows of x·xᵀ (any positive scale). The procedure:
//   dead columns (H_ii = 0: an input that was always zero): H_ii = 1 and w_i = 0;
//   H += damp · mean(diag H) · I;  U = the upper Cholesky factor of H⁻¹ (H⁻¹ = Uᵀ·U);
//   for each column i in order (every row independently):
//     at a group's first column: fit the group's scale (and min) to the current, error-updated
//       weights of that group as round-to-nearest does (rounded to scale_dtype, as stored);
//     q_i = the nearest code of w_i;  e = (w_i − value(q_i)) / U_ii;  w_j −= e · U_ij for j > i.
// A Hessian that is not positive definite after damping is retried with ten times the damping
// (up to 1000×), then a ConfigError naming `what`.
//
// act_order (AutoGPTQ's desc_act with static_groups): the columns are swept in order of falling
// H_ii (the inputs with the most energy first, while the most columns are left to absorb their
// error), and every group's scale (and min) is fitted to the ORIGINAL weights up front, as
// round to nearest fits them, so the groups stay contiguous in the stored layout. Measured on
// stories260K (docs/export.md): it helps symmetric codes most.
#pragma once

#include <string>

#include "core/tensor.h"
#include "ops/quant.h"

namespace unillm::ops {

QuantizedWeight gptq_quantize_weight(const Tensor& w, const Tensor& hessian, QuantType type, int64_t group,
                                     bool symmetric, double damp = 0.01, const std::string& what = "weight",
                                     DType scale_dtype = DType::f32, bool act_order = false);

}  // namespace unillm::ops
