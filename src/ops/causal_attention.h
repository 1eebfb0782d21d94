// Training attention: causal, GQA, with optional segment ids that keep packed samples apart.
// Flash-style in both directions (tiled online softmax forward, FlashAttention-2 recompute
// backward; no [T, T] matrix), recorded through autograd.
//
//   q            [B, T, H, D]    f32 or f64
//   k, v         [B, T, Hkv, D]  q's dtype; H % Hkv == 0, head h uses kv head h / (H / Hkv)
//   segment_ids  [B, T] i32, or undefined (plain causal)
//   out          [B, T, H, D]    q's dtype
// Row t of batch b attends to rows j <= t with segment_ids[b][j] == segment_ids[b][t]; every row
// sees at least itself. out = softmax(q·kᵀ · scale, masked) · v.
#pragma once

#include <array>

#include "core/tensor.h"

namespace unillm::ops {

// Forward kernel. lse [B, T, H] receives the per-row log-sum-exp of the scaled scores (f32 for
// f32 inputs, f64 for f64 so the f64 path stays exact). segment_ids may be nullptr.
struct CausalAttentionArgs {
  const void* q;
  const void* k;
  const void* v;
  const int32_t* segment_ids;
  void* out;
  void* lse;
  int64_t batch, tokens, heads, kv_heads, head_dim;
  float scale;
  DType dtype;
};
using CausalAttentionKernel = void(const CausalAttentionArgs&);

// Backward kernel: grad_q/grad_k/grad_v are overwritten (not +=); a nullptr one is not computed.
// out and lse are the forward's; grad_out [B, T, H, D].
struct CausalAttentionBackwardArgs {
  const void* q;
  const void* k;
  const void* v;
  const void* out;
  const void* lse;
  const void* grad_out;
  const int32_t* segment_ids;
  void* grad_q;
  void* grad_k;
  void* grad_v;
  int64_t batch, tokens, heads, kv_heads, head_dim;
  float scale;
  DType dtype;
};
using CausalAttentionBackwardKernel = void(const CausalAttentionBackwardArgs&);

// Records a CausalAttentionNode when autograd::needs_grad({q, k, v}) (segment_ids is never
// differentiated). lse, when given, receives the row log-sum-exp [B, T, H].
Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& segment_ids, float scale, Tensor* lse = nullptr);

// causal_attention whose result is already known: out and lse from an earlier causal_attention
// of the same q, k, v (a recompute re-run). Returns out and records the same node, without
// running the forward kernel again.
Tensor causal_attention_replay(const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& segment_ids, float scale, const Tensor& out,
                               const Tensor& lse);

// The pieces the node uses, public for tests and for recompute: the forward with its lse, and the
// backward from saved tensors. Inputs are made contiguous; outputs are fresh tensors.
struct CausalAttentionSaved {
  Tensor q, k, v, segment_ids, out, lse;
  float scale = 1.0f;
};
CausalAttentionSaved causal_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                              const Tensor& segment_ids, float scale);
struct CausalAttentionGrads {
  Tensor dq, dk, dv;  // undefined where not requested
};
CausalAttentionGrads causal_attention_backward(const CausalAttentionSaved& s,
                                               const Tensor& grad_out,
                                               std::array<bool, 3> need = {true, true, true});

// Straightforward per-row loops in double (full softmax; the backward recomputes each row's
// probabilities and does not read out/lse): the fallback, and an independent check of kernels.
void causal_attention_reference(const CausalAttentionArgs& a);
void causal_attention_backward_reference(const CausalAttentionBackwardArgs& a);

}  // namespace unillm::ops
