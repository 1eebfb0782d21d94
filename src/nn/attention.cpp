// Llama-family attention forward.
#include "nn/attention.h"

#include <cmath>

#include "autograd/grad_mode.h"
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
           c.qkv_bias, ParamPlacement(c.weight_dtype, c.device)),
      o_proj_(c.heads * c.head_dim, c.hidden, c.o_bias, ParamPlacement(c.weight_dtype, c.device),
              "o_proj") {
  register_module("", &qkv_);
  register_module("", &o_proj_);
  if (c.qk_norm) {
    q_norm_ = std::make_unique<RMSNorm>(c.head_dim, c.norm_eps, c.device);
    k_norm_ = std::make_unique<RMSNorm>(c.head_dim, c.norm_eps, c.device);
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

Tensor Attention::forward_train(const Tensor& x, const TrainInputs& in, ops::OutputUse use,
                                AttentionStash* stash) const {
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
  // With packed (bf16/f16) saves the re-run starts from a rounded x, so its q and k would not be
  // the ones the forward's out and lse came from: recompute the attention there instead.
  if (autograd::saved_tensor_hooks()) stash = nullptr;
  Tensor q4 = ops::reshape(q, {b, t, h, d}), k4 = ops::reshape(k, {b, t, hkv, d});
  Tensor v4 = ops::reshape(qkv[2], {b, t, hkv, d}), o;
  if (stash && use == ops::OutputUse::kGradOnly && stash->out.saved()) {
    o = ops::causal_attention_replay(q4, k4, v4, in.segment_ids, scale, stash->out.get(),
                                     stash->lse.get());
    *stash = AttentionStash();  // the node holds them now
  } else {
    Tensor lse;
    o = ops::causal_attention(q4, k4, v4, in.segment_ids, scale, stash ? &lse : nullptr);
    if (stash && use == ops::OutputUse::kValue)
      *stash = AttentionStash{autograd::SavedTensor::activation(o), autograd::SavedTensor(lse)};
  }
  return o_proj_.forward(ops::reshape(o, {n, h * d}), in.lora.get(), use);
}

}  // namespace unillm::nn
