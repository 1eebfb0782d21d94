// oft_linear: a (fused) linear layer whose targeted parts see an OFT-rotated input (PEFT 0.17's
// OFT Linear.forward: base_layer(oft_R(x))). Per part p of W's rows:
//   y[:, cols_p] = oft_rotate(x, R_p) · W_pᵀ + b_p    (targeted part)
//   y[:, cols_p] = x · W_pᵀ + b_p                      (untargeted part)
// composed from oft_rotate and linear per part (consecutive untargeted parts share one linear),
// the pieces concatenated along the last dim (a copy of y's size; gradients are the column
// slices). Shapes: x [.., K] f32/f64; W [N, K] as ops::linear takes it (frozen in practice);
// bias [N] or undefined; weight [rows, b(b−1)/2] in x's dtype. Gradients: as oft_rotate and
// linear (dx summed over the parts; d weight only in each part's rows).
#pragma once

#include <vector>

#include "core/tensor.h"
#include "ops/linear.h"
#include "ops/quant.h"

namespace unillm::ops {

struct OftLinearPart {
  int64_t col_begin = 0, cols = 0;
  int64_t first_row = -1;  // first row of weight holding this part's blocks; -1 = not rotated
};

struct OftLinearInput {
  Tensor weight;  // [rows, b(b−1)/2], PEFT's oft_R weights of every targeted part, stacked
  int64_t block_size = 0;
  bool neumann = true;
  int64_t terms = 5;
  std::vector<OftLinearPart> parts;  // cover W's rows [0, N) in order
};

Tensor oft_linear(const Tensor& x, const Tensor& w, const Tensor& bias, const OftLinearInput& in,
                  OutputUse use = OutputUse::kValue);

// The same over a frozen quantised weight (QOFT: LLaMA-Factory's OFT with quantization_bit):
// linear_q cannot multiply a row range of a block-quantised matrix, so each targeted part runs
// the whole linear_q on its rotated input and keeps its own columns (split_last); the untargeted
// parts share one linear_q of x. A fused layer with P targeted parts costs P GEMMs (q/k/v: 3×).
Tensor oft_linear_q(const Tensor& x, const QuantizedWeight& q, const Tensor& bias, const OftLinearInput& in);

}  // namespace unillm::ops
