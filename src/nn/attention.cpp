// Llama-family attention forward.
#include "nn/attention.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "ops/rms_norm.h"
#include "ops/rope.h"
#include "ops/rope_qkv.h"
#include "ops/attention.h"
#include "ops/shape.h"

namespace unillm::nn {

Attention::Attention(const AttentionConfig& c)
    : c_(c),
      qkv_(c.hidden,
           {{"q_proj", c.heads * c.head_dim}, {"k_proj", c.kv_heads * c.head_dim},
            {"v_proj", c.kv_heads * c.head_dim}},
           c.qkv_bias, ParamPlacement(c.weight_dtype, c.device, c.lazy_weights)),
      o_proj_(c.heads * c.head_dim, c.hidden, c.o_bias, ParamPlacement(c.weight_dtype, c.device, c.lazy_weights),
              "o_proj") {
  register_module("", &qkv_);
  register_module("", &o_proj_);
  qkv_.set_split(TpSplit::kColumn);
  o_proj_.set_split(TpSplit::kRow);
  if (c.qk_norm) {
    q_norm_ = std::make_unique<RMSNorm>(c.head_dim, c.norm_eps, c.device);
    k_norm_ = std::make_unique<RMSNorm>(c.head_dim, c.norm_eps, c.device);
    register_module("q_norm", q_norm_.get());
    register_module("k_norm", k_norm_.get());
  }
}

Tensor Attention::forward(const Tensor& x, const AttentionInputs& in, LayerCache cache,
                          ops::OutputUse use, AttentionStash* stash) const {
  // Under tensor parallelism this rank's heads (q/k/v column-parallel give their rows), of every
  // token (sequence parallelism gathers them).
  const TensorParallel* tp = in.tp.active() && !cache.k ? &in.tp : nullptr;
  const int64_t split = tp ? tp->group->size() : 1;
  const int64_t h = c_.heads / split, hkv = c_.kv_heads / split, d = c_.head_dim;
  const Tensor projected = qkv_.forward(x, in.lora.get(), ops::OutputUse::kValue, tp);
  const int64_t n = projected.size(0);
  Tensor q, k, v;
  if (fused_rope_) {
    auto heads = ops::rope_qkv(projected, in.positions, *in.inv_freq, h, hkv, d);
    q = heads.q;
    k = heads.k;
    v = heads.v;
  } else {
    auto qkv = ops::split_last(projected, {h * d, hkv * d, hkv * d});
    q = ops::reshape(qkv[0], {n, h, d});
    k = ops::reshape(qkv[1], {n, hkv, d});
    v = ops::reshape(qkv[2], {n, hkv, d});
    if (c_.qk_norm) {  // Qwen3: RMSNorm over each head vector before RoPE
      q = q_norm_->forward(q);
      k = k_norm_->forward(k);
    }
    q = ops::rope(q, in.positions, *in.inv_freq);
    k = ops::rope(k, in.positions, *in.inv_freq);
  }
  ops::AttentionLayout layout;
  if (cache.k) {
    layout.k_cache = cache.k;
    layout.v_cache = cache.v;
    layout.slot_mapping = in.slot_mapping;
    layout.batch = in.batch;
  } else {
    layout.rows = in.rows;
    layout.tokens = in.tokens;
    layout.segment_ids = in.segment_ids;
  }
  const float scale = static_cast<float>(c_.score_scale) / std::sqrt(static_cast<float>(d));
  // With packed (bf16/f16) saves the re-run starts from a rounded x, so its q and k would not be
  // the ones the forward's out and lse came from: recompute the attention there instead.
  if (cache.k || autograd::saved_tensor_hooks()) stash = nullptr;
  if (in.shift && !cache.k) {  // S²-Attn: a recompute re-run attends again (no stash)
    // Under tensor parallelism this rank's heads are [rank · h, (rank + 1) · h) of the model's.
    Tensor o = tp ? shifted_group_attention_part(q, k, v, *in.shift, scale, tp->group->rank() * h, c_.heads)
                  : shifted_group_attention(q, k, v, *in.shift, scale);
    return o_proj_.forward(ops::reshape(o, {n, h * d}), in.lora.get(), use, tp);
  }
  ops::AttentionSaves saves;
  if (stash && use == ops::OutputUse::kGradOnly && stash->out.saved()) {
    saves = {ops::AttentionSaves::kReplay, stash->out.get(), stash->lse.get()};
    *stash = AttentionStash();  // the node holds them now
  }
  Tensor o = ops::attention(q, k, v, layout, scale, stash ? &saves : nullptr);
  if (stash && saves.mode == ops::AttentionSaves::kRecord && use == ops::OutputUse::kValue)
    *stash = AttentionStash{autograd::SavedTensor::activation(saves.out), autograd::SavedTensor(saves.lse)};
  return o_proj_.forward(ops::reshape(o, {n, h * d}), in.lora.get(), use, tp);
}

void Attention::check_split(int size) const {
  if (size == 1) return;
  if (c_.heads % size != 0 || c_.kv_heads % size != 0)
    UNILLM_THROW(ConfigError, "[nn] tensor_parallel_degree ", size, " does not divide the attention's ", c_.heads,
                 " heads and ", c_.kv_heads, " key/value heads (each rank takes whole heads)");
  qkv_.check_split(size);
  o_proj_.check_split(size);
}

void Attention::split_tensors(std::vector<const Tensor*>& out) const {
  qkv_.split_tensors(out);
  o_proj_.split_tensors(out);
  for (const RMSNorm* norm : {q_norm_.get(), k_norm_.get()})
    if (norm) out.push_back(&norm->weight());
}

bool Attention::set_fused_rope(bool on) {
  fused_rope_ = on && !c_.qk_norm;
  return fused_rope_ == on;
}

}  // namespace unillm::nn
