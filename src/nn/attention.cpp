// Llama-family attention forward.
#include "nn/attention.h"

#include <cmath>

#include "ops/rms_norm.h"
#include "ops/rope.h"
#include "ops/causal_attention.h"
#include "ops/shape.h"

namespace unillm::nn {

Attention::Attention(const AttentionConfig& c)
    : c_(c),
      qkv_(c.hidden,
           {{"q_proj", c.heads * c.head_dim}, {"k_proj", c.kv_heads * c.head_dim},
            {"v_proj", c.kv_heads * c.head_dim}},
           c.qkv_bias, c.weight_dtype),
      o_proj_(c.heads * c.head_dim, c.hidden, c.o_bias, c.weight_dtype, "o_proj") {
  register_module("", &qkv_);
  register_module("", &o_proj_);
  if (c.qk_norm) {
    q_norm_ = std::make_unique<RMSNorm>(c.head_dim, c.norm_eps);
    k_norm_ = std::make_unique<RMSNorm>(c.head_dim, c.norm_eps);
    register_module("q_norm", q_norm_.get());
    register_module("k_norm", k_norm_.get());
  }
}

Tensor Attention::forward(const Tensor& x, const AttentionInputs& in, Tensor& k_cache,
                          Tensor& v_cache) const {
  const int64_t n = x.size(0), h = c_.heads, hkv = c_.kv_heads, d = c_.head_dim;
  Tensor qkv = qkv_.forward(x, in.lora);  // [N, (H + 2 Hkv) D]
  Tensor q = qkv.slice(1, 0, h * d).contiguous().view({n, h, d});
  Tensor k = qkv.slice(1, h * d, (h + hkv) * d).contiguous().view({n, hkv, d});
  Tensor v = qkv.slice(1, (h + hkv) * d, (h + 2 * hkv) * d).contiguous().view({n, hkv, d});
  if (c_.qk_norm) {  // Qwen3: RMSNorm over each head vector before RoPE
    q = q_norm_->forward(q);
    k = k_norm_->forward(k);
  }
  q = ops::rope(q, in.positions, *in.inv_freq);
  k = ops::rope(k, in.positions, *in.inv_freq);
  ops::kv_cache_write(k, k_cache, in.slot_mapping);
  ops::kv_cache_write(v, v_cache, in.slot_mapping);
  float scale = 1.0f / std::sqrt(static_cast<float>(d));
  Tensor o = ops::paged_attention(q, k_cache, v_cache, *in.batch, scale);  // [N, H, D]
  return o_proj_.forward(o.view({n, h * d}), in.lora);
}

Tensor Attention::forward_train(const Tensor& x, const TrainInputs& in, ops::OutputUse use) const {
  const int64_t n = x.size(0), h = c_.heads, hkv = c_.kv_heads, d = c_.head_dim;
  auto qkv = ops::split_last(qkv_.forward(x, in.lora.get()), {h * d, hkv * d, hkv * d});
  Tensor q = ops::reshape(qkv[0], {n, h, d});
  Tensor k = ops::reshape(qkv[1], {n, hkv, d});
  if (c_.qk_norm) {
    q = q_norm_->forward(q);
    k = k_norm_->forward(k);
  }
  q = ops::rope(q, in.positions, *in.inv_freq);
  k = ops::rope(k, in.positions, *in.inv_freq);
  const int64_t b = in.batch, t = in.seq;
  float scale = 1.0f / std::sqrt(static_cast<float>(d));
  Tensor o = ops::causal_attention(ops::reshape(q, {b, t, h, d}), ops::reshape(k, {b, t, hkv, d}),
                                   ops::reshape(qkv[2], {b, t, hkv, d}), in.segment_ids, scale);
  return o_proj_.forward(ops::reshape(o, {n, h * d}), in.lora.get(), use);
}

}  // namespace unillm::nn
