// Mixture-of-experts routing and combination (HF's Qwen2/Qwen3 MoE sparse block; nn/moe.h).
//
// moe_route: router logits [N, E] (f32/f64) → for each token the k experts of highest softmax
// probability (descending; ties to the lower index) and their weights [N, k] in logits' dtype:
// the probabilities, or with `normalize` (norm_topk_prob) the probabilities divided by their sum
// over the k — which equals the softmax over the k chosen logits, so its backward reaches only
// those. Backward: dlogits = p ⊙ (g − ⟨p, g⟩) with g the weights' gradient scattered to the
// experts (no normalize), or over the chosen ones w ⊙ (dw − ⟨w, dw⟩) (normalize). Computed on the
// host (N·E values); the weights come back on the logits' device. With a balance (training with
// the router load-balancing loss, ops/moe_balance.h) the call records its routing there when
// `record` (false in a recompute re-run, whose forward was recorded already), and its backward
// adds the balance's gradient.
//
// moe_combine: out [rows, C] with out[idx[i]] += w[i] · y[i] for i < M (y [M, C] f32/f64, w [M]
// of y's dtype, idx [M] i32 on the CPU, each in [0, rows)). Each output row adds its sources in
// increasing i. Backward: dy[i] = w[i] · dout[idx[i]], dw[i] = ⟨y[i], dout[idx[i]]⟩.
// Kernel keys "moe_combine" / "moe_combine_backward" = dtype.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/tensor.h"

namespace unillm::ops {

struct MoeRouting {
  Tensor weights;  // [N, k], differentiable w.r.t. the logits
  std::vector<int32_t> experts;  // [N · k]: expert of slot (n, j) at n · k + j
};

class MoeBalance;
MoeRouting moe_route(const Tensor& logits, int64_t k, bool normalize,
                     const std::shared_ptr<MoeBalance>& balance = nullptr, bool record = true);

struct MoeCombineArgs {
  const void* y;  // [m, dim]
  const void* w;  // [m]
  const int32_t* idx;  // [m]
  void* out;  // [rows, dim] (overwritten)
  int64_t m, rows, dim;
  DType dtype;
};
using MoeCombineKernel = void(const MoeCombineArgs&);

struct MoeCombineBackwardArgs {
  const void* y;  // [m, dim]
  const void* w;  // [m]
  const int32_t* idx;  // [m]
  const void* dout;  // [rows, dim]
  void* dy;  // [m, dim] (overwritten)
  void* dw;  // [m] (overwritten)
  int64_t m, rows, dim;
  DType dtype;
};
using MoeCombineBackwardKernel = void(const MoeCombineBackwardArgs&);

Tensor moe_combine(const Tensor& y, const Tensor& w, const Tensor& idx, int64_t rows);
void moe_combine_reference(const MoeCombineArgs& a);
void moe_combine_backward_reference(const MoeCombineBackwardArgs& a);

// sigmoid(x) elementwise (f32/f64; the shared expert's gate). Backward dy · s · (1 − s).
Tensor sigmoid(const Tensor& x);

}  // namespace unillm::ops
