// The Llama decoder stack shared by llama, mistral, qwen2 and qwen3 (differences are config
// flags): embed → L × (norm, attention, residual, norm, SwiGLU MLP, residual) → norm → lm_head.
#pragma once

#include <memory>
#include <vector>

#include "models/causal_lm.h"
#include "nn/attention.h"
#include "nn/mlp.h"
#include "nn/norm.h"

namespace unillm::models {

class DecoderLayer : public nn::Module {
 public:
  DecoderLayer(const ModelConfig& c, nn::ParamPlacement weights);
  // x [N, C] → [N, C]: attention_block then mlp_block, with the layer's cache for inference
  // (none for training). The two blocks are also the training recompute segments
  // (nn/recompute.h):
  //   attention_block: h = x + o_proj(attn(input_layernorm(x)))
  //   mlp_block:     out = h + down_proj(swiglu(gate_up(post_attention_layernorm(h))))
  // use = kGradOnly (recompute's backward re-run) skips the last projection's GEMM; the returned
  // value is then meaningless, its graph exact.
  Tensor forward(const Tensor& x, const nn::AttentionInputs& in, nn::LayerCache cache = {}) const;
  Tensor attention_block(const Tensor& x, const nn::AttentionInputs& in, ops::OutputUse use,
                         nn::AttentionStash* stash = nullptr, nn::LayerCache cache = {}) const;
  Tensor mlp_block(const Tensor& h, const nn::AttentionInputs& in, ops::OutputUse use) const;
  // Whether a segment's parameters need gradients (freeze may train one block of a layer only).
  bool attention_params_need_grad();
  bool mlp_params_need_grad();

 private:
  nn::RMSNorm input_norm_, post_attn_norm_;
  nn::Attention attn_;
  nn::MLP mlp_;
};

class Llama : public CausalLM, public nn::Module {
 public:
  Llama(const ModelConfig& c, nn::ParamPlacement weights);
  const ModelConfig& config() const override { return c_; }
  Device device() const override { return device_; }
  Tensor forward(const ForwardBatch& batch, KvCaches& caches) override;
  nn::NamedTensors named_parameters() const override { return nn::Module::named_parameters(); }
  nn::Module& module() override { return *this; }
  LossResult loss(const TrainBatch& batch, bool recompute, double grad_scale_hint = 0) override;
  const Tensor& lm_head_weight() const override { return lm_head(); }
  void set_lm_head_quantized(ops::QuantizedWeight q) override;
  const ops::QuantizedWeight& lm_head_quantized() const override { return lm_head_q_; }

 private:
  ModelConfig c_;
  Device device_;
  std::vector<float> inv_freq_;
  Tensor embed_;  // [V, C]
  std::vector<std::unique_ptr<DecoderLayer>> layers_;
  nn::RMSNorm norm_;
  Tensor lm_head_;  // [V, C]; undefined when tied (embed_ serves) or quantised
  ops::QuantizedWeight lm_head_q_;  // the quantised lm_head (inference), when set
  const Tensor& lm_head() const { return c_.tie_word_embeddings ? embed_ : lm_head_; }
  // The decoder layers over x [N, C] (before the final norm), shared by forward and loss: with
  // caches each layer writes and reads its paged K/V; without, recompute (training only) runs
  // each layer as two recompute segments.
  Tensor layers(Tensor x, const nn::AttentionInputs& in, KvCaches* caches, bool recompute);
  nn::Scope model_;  // the "model." scope of HF names
};

}  // namespace unillm::models
