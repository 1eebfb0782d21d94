// The Llama decoder stack shared by llama, mistral, qwen2, qwen3 and their MoE forms (differences
// are config flags): embed → L × (norm, attention, residual, norm, SwiGLU MLP or mixture of
// experts, residual) → norm → lm_head.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "models/causal_lm.h"
#include "nn/attention.h"
#include "nn/mlp.h"
#include "nn/moe.h"
#include "nn/norm.h"

namespace unillm::models {

class DecoderLayer : public nn::Module {
 public:
  DecoderLayer(const ModelConfig& c, int64_t index, nn::ParamPlacement weights);
  // The layer's one forward, in residual-stream form: the stream is sum + delta (delta undefined:
  // just sum) and the layer returns its output as {h, mlp(...)} unadded, so that each residual
  // add meets the norm that reads its sum (one fused op under the fuse_residual_rms_norm pass):
  //   h   = x + o_proj(attn(input_layernorm(x)))           x = stream.sum + stream.delta
  //   out = {h, down_proj(swiglu(gate_up(post_attention_layernorm(h))))}
  // With the layer's cache for inference (written and read through the paged K/V), none for
  // training.
  struct Stream {
    Tensor sum, delta;
  };
  Stream forward(const Stream& x, const nn::AttentionInputs& in, nn::LayerCache cache = {}) const;
  // The same layer as the two training recompute segments (nn/recompute.h), each ending in its
  // residual add: attention_block gives h from x, mlp_block h + mlp(...) from h. use = kGradOnly
  // (recompute's backward re-run) skips the last projection's GEMM; the returned value is then
  // meaningless, its graph exact.
  Tensor attention_block(const Tensor& x, const nn::AttentionInputs& in, ops::OutputUse use,
                         nn::AttentionStash* stash = nullptr) const;
  Tensor mlp_block(const Tensor& h, const nn::AttentionInputs& in, ops::OutputUse use) const;
  // Whether a segment's parameters need gradients (freeze may train one block of a layer only).
  bool attention_params_need_grad();
  bool mlp_params_need_grad();
  // The attention's heads over attention_size processes, the MLP over mlp_size (1: whole).
  void check_split(int attention_size, int mlp_size) const;
  // Expert parallelism over size processes: whether the layer is sparse (ConfigError when its
  // experts do not split evenly).
  bool check_experts_split(int size) const;
  void split_tensors(std::vector<const Tensor*>& out) const;
  // Its split linears with their groups (CausalLM::split_linears; mlp nullptr: the MLP runs whole).
  void split_linears(std::vector<CausalLM::SplitLinear>& out, nn::Collective* attention, nn::Collective* mlp);
  // A mixture-of-depths layer (ModelConfig::mod_layer): its router, [1, C] and [1] f32.
  bool is_mod() const { return router_w_.defined(); }
  const Tensor& router_weight() const { return router_w_; }
  const Tensor& router_bias() const { return router_b_; }

 private:
  // A mixture-of-depths layer registers its own modules under "block." and its router beside.
  nn::Scope block_;
  Tensor router_w_, router_b_;
  nn::RMSNorm input_norm_, post_attn_norm_;
  nn::Attention attn_;
  // One of the two, registered as "mlp": the dense MLP, or a sparse layer's experts (nn/moe.h).
  std::unique_ptr<nn::MLP> mlp_;
  std::unique_ptr<nn::SparseMoE> moe_;
  int64_t index_;  // in the model
  Tensor feed_forward(const Tensor& h, const nn::AttentionInputs& in, ops::OutputUse use,
                      const nn::TensorParallel* tp) const;
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
  Tensor hidden_states(const TrainBatch& batch, bool recompute) override;
  Tensor hidden_states_range(const TrainBatch& batch, const Tensor& input, int64_t begin, int64_t end,
                             bool recompute) override;
  const Tensor& lm_head_weight() const override { return lm_head(); }
  void set_lm_head_quantized(ops::QuantizedWeight q) override;
  const ops::QuantizedWeight& lm_head_quantized() const override { return lm_head_q_; }
  void set_vocab_weights(Tensor embed, Tensor lm_head) override;  // in resize_vocab.cpp
  void set_tensor_parallel(nn::Collective* group, bool sequence_parallel = false, bool vocab_parallel = false,
                           bool attention_only = false, nn::Collective* mlp_group = nullptr) override;
  void set_expert_parallel(nn::Collective* group) override;
  std::vector<const Tensor*> tensor_parallel_tensors() const override;
  std::vector<SplitLinear> split_linears() override;
  int64_t mod_calls() const override { return mod_calls_; }
  void set_mod_calls(int64_t calls) override;
  int64_t train_rows(const TrainBatch& batch) const override;
  Tensor loss_labels(const TrainBatch& batch) const override;

 private:
  ModelConfig c_;
  Device device_;
  std::vector<float> inv_freq_;
  // Dynamic NTK RoPE: the table of each sequence length seen beyond max_position_embeddings
  // (kept: AttentionInputs points at it through backward and recompute).
  mutable std::mutex dynamic_mutex_;
  mutable std::map<int64_t, std::vector<float>> dynamic_tables_;
  const std::vector<float>* rope_table(const Tensor& positions) const;
  Tensor embed_;  // [V, C]
  std::vector<std::unique_ptr<DecoderLayer>> layers_;
  nn::RMSNorm norm_;
  Tensor lm_head_;  // [V, C]; undefined when tied (embed_ serves) or quantised
  ops::QuantizedWeight lm_head_q_;  // the quantised lm_head (inference), when set
  const Tensor& lm_head() const { return c_.tie_word_embeddings ? embed_ : lm_head_; }
  // The decoder layers over x [N, C], shared by forward and loss: with caches each layer writes
  // and reads its paged K/V; recompute (training only) runs each layer as its two segments.
  // Layers [begin, end) only when given (a pipeline stage's).
  DecoderLayer::Stream layers(Tensor x, const nn::AttentionInputs& in, KvCaches* caches, bool recompute,
                              size_t begin = 0, size_t end = SIZE_MAX);
  // Mixture-of-depths (models/mixture_of_depths.h, in llama_mod.cpp): layer i over the stream's
  // sum, the selected tokens of each row through the layer as a sequence of their own, the rest
  // passed through. mod_calls_ counts the training forwards (the package's training_step) and
  // mod_capacity_ is the capacity they last set (evaluation keeps it).
  DecoderLayer::Stream mod_layer(size_t i, const DecoderLayer::Stream& x, const nn::AttentionInputs& in) const;
  int64_t mod_calls_ = 0;
  double mod_capacity_ = 0.125;
  // The training attention inputs of a batch (positions, LoRA run with its dropout draw, segments,
  // tensor parallelism).
  nn::AttentionInputs train_inputs(const TrainBatch& batch) const;
  // The training forward to the final norm: [N, C], or this rank's rows under sequence
  // parallelism (in.tp.rows()).
  Tensor train_hidden(const TrainBatch& batch, const nn::AttentionInputs& in, bool recompute);
  void refuse_sequence_parallel(const char* what) const;
  // The final norm of the stream's rows (all when rows is undefined).
  Tensor final_norm(DecoderLayer::Stream stream, const Tensor& rows) const;
  // The token embedding, with the layer hooks' index -1 around it (ZeRO-3's embedding unit); with
  // a training batch whose neftune_alpha > 0, plus its NEFTune noise for rows [first_row,
  // first_row + ids.numel()) of the batch.
  Tensor embed(const Tensor& ids, const TrainBatch* train = nullptr, int64_t first_row = 0);
  nn::Scope model_;  // the "model." scope of HF names
};

}  // namespace unillm::models
