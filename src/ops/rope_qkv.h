// rope_qkv: splits the fused q/k/v projection output and applies RoPE to q and k in one pass (the
// fuse_rope_into_qk inference pass). For each token the cos/sin table is computed once and serves
// every q and k head:
//   qkv [N, (H + 2·Hkv)·D] -> q = rope(qkv[:, :H·D]) [N, H, D], k = rope(next Hkv·D) [N, Hkv, D],
//                             v = the last Hkv·D columns [N, Hkv, D]
// with the rotation, angles and cos/sin of ops::rope (f32 angle, f32 cos/sin), so the values equal
// split_last + reshape + rope.
// Gradients, f64, and devices without a "rope_qkv" kernel take those composed ops, which carry
// the backward; the fused kernel is a forward-only fast path.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace unillm::ops {

struct RopeQkvArgs {
  const float* qkv;  // [n, (heads + 2·kv_heads)·head_dim]
  float* q;  // [n, heads, head_dim]
  float* k;  // [n, kv_heads, head_dim]
  float* v;  // [n, kv_heads, head_dim]
  const int32_t* positions;  // [n]
  const float* inv_freq;  // [rot_dim / 2]
  int64_t n, heads, kv_heads, head_dim, rot_dim;
};
using RopeQkvKernel = void(const RopeQkvArgs&);

struct QkvHeads {
  Tensor q, k, v;
};

QkvHeads rope_qkv(const Tensor& qkv, const Tensor& positions, const std::vector<float>& inv_freq,
                  int64_t heads, int64_t kv_heads, int64_t head_dim);
void rope_qkv_reference(const RopeQkvArgs& a);

}  // namespace unillm::ops
