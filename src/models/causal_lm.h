// A Llama-family causal LM built from a Hugging Face model dir (config.json + safetensors).
// One forward serves inference (paged KV cache) and, later, training (a one-block cache per
// sequence). Parameters carry HF names; load and save walk those names.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/tensor.h"
#include "ops/quant.h"
#include "models/kv_cache.h"
#include "models/model_config.h"
#include "nn/linear.h"
#include "nn/module.h"
#include "ops/attention.h"
#include "ops/moe_balance.h"

namespace unillm::models {

class CausalLM;

struct LoadOptions {
  Device device;
  // Weight storage dtype for matrices: "" keeps the checkpoint's (f32/bf16/f16), else converts.
  std::string weight_dtype;
  // Called for each FusedLinear as soon as all of its parameters are read, before the next
  // layer's are: QLoRA quantises there (train/finetune.h), so the dense copies of the decoder's
  // matrices never all live at once. What the hook frees goes back to the system before the
  // next layer loads (the allocator's cache is released).
  std::function<void(nn::FusedLinear&)> on_linear_loaded;
  // Changes the config read from config.json before the model is built (keeping its raw_json in
  // step, which save_pretrained writes): LLaMA-Factory's rope_scaling (train/rope_scaling.h).
  std::function<void(ModelConfig&)> adjust_config;
  // Loading straight into where the weights will live (ZeRO-3's shards of a frozen model, or
  // storage given memory only as it is read: tensor parallelism's blocks cut as read): the
  // model is built lazy (its matrices without memory), on_built runs before any weight is read
  // (it may re-point the parameters), and before_copy with each parameter (a view of it) just
  // before its values are copied in, in the model's parameter order.
  bool lazy = false;
  std::function<void(CausalLM&)> on_built;
  std::function<void(const Tensor&)> before_copy;
};

// One forward call: N new tokens of S sequences, already laid out for the paged cache.
struct ForwardBatch {
  Tensor ids;  // [N] i32
  Tensor positions;  // [N] i32
  Tensor slot_mapping;  // [N] i32, cache slot of each token
  ops::AttentionBatch attn;  // block tables, q_start, kv_len
  Tensor logit_rows;  // [M] i32 rows of the N whose logits are wanted; undefined = all
  // Adapters for this call: unset = the model's active set; {} = base model only.
  std::optional<std::vector<std::string>> adapters;
  // Per-row adapters (a serving step batching requests for different adapters): each entry
  // applies `name` to rows [begin, end) of the N tokens; when non-empty it replaces `adapters`,
  // and rows no entry covers run on the base model.
  struct AdapterRows {
    std::string name;
    int64_t begin = 0, end = 0;
  };
  std::vector<AdapterRows> adapter_rows;
};

// One training micro-batch of B rows × T tokens (HF conventions: labels are NOT shifted;
// position t is scored against labels[t + 1]; -100 = not scored).
struct TrainBatch {
  Tensor input_ids;  // [B, T] i32
  Tensor labels;  // [B, T] i32
  Tensor position_ids;  // [B, T] i32
  Tensor segment_ids;  // [B, T] i32, or undefined: plain causal attention within each row
  // Adapters for this call: unset = the model's active set; {} = base model only (e.g. DPO's
  // reference model).
  std::optional<std::vector<std::string>> adapters;
  // Training: LoRA dropout draws its masks from a seed taken from this RNG (one next_u64() per
  // call, only when an active adapter has dropout > 0). nullptr = no dropout (evaluation).
  Rng* dropout_rng = nullptr;
  // NEFTune (HF's neftune_noise_alpha): a training forward adds uniform noise in ±alpha /
  // sqrt(T · C) (T = input_ids.size(1), C the hidden size) to the embedding output, drawn per row
  // from neftune_seed (neftune_noise). 0 = off (evaluation, inference).
  double neftune_alpha = 0;
  uint64_t neftune_seed = 0;
  // LongLoRA's S²-Attn (LLaMA-Factory's shift_attn, nn/shift_attention.h): a training forward
  // attends within groups of ⌊T · ratio⌋ tokens, half the heads shifted. 0 = full causal
  // attention (evaluation, inference). row_lengths: real tokens per row (the rest is padding,
  // never attended); empty = no padding.
  double shift_attn_ratio = 0;
  std::vector<int32_t> row_lengths;
  // Mixture-of-experts models trained with the router load-balancing loss (output_router_logits):
  // the sparse layers record their routing of the B·T rows here, and their backward adds its
  // gradient (ops/moe_balance.h; moe_balance_for makes one). null = no such loss.
  std::shared_ptr<ops::MoeBalance> moe_balance;
};

// A balance over b's rows (real: row r's first row_lengths[r] tokens; every token when
// row_lengths is empty) for config's experts, backward seeded with seed.
std::shared_ptr<ops::MoeBalance> moe_balance_for(const TrainBatch& b, const ModelConfig& config, double seed);

// The NEFTune noise of rows [lo, hi) of b's flattened [B·T] tokens: [hi − lo, C] f32 on the host,
// row r from its own stream (seed, r), so a rank holding some rows (sequence parallelism) draws
// what one process would for them.
Tensor neftune_noise(const TrainBatch& b, int64_t lo, int64_t hi, int64_t hidden);

struct LossResult {
  Tensor loss_sum;  // scalar: Σ over scored tokens of -log p (differentiable)
  int64_t count = 0;  // scored tokens
};

class CausalLM {
 public:
  virtual ~CausalLM() = default;
  virtual const ModelConfig& config() const = 0;
  // Where its parameters live; forward and loss run there (their outputs are on it).
  virtual Device device() const = 0;
  // Runs the decoder over the batch, writing K/V into caches; returns f32 logits [M, V]
  // for the rows in batch.logit_rows only (the lm_head is never computed for the others).
  virtual Tensor forward(const ForwardBatch& batch, KvCaches& caches) = 0;
  virtual nn::NamedTensors named_parameters() const = 0;
  virtual nn::Module& module() = 0;
  // Training forward: the summed token loss of the batch, recorded for backward. With
  // recompute, each decoder layer keeps only its input and its mid-layer residual h, and re-runs
  // its attention and MLP blocks in backward (nn/recompute.h). A non-zero
  // grad_scale_hint (the d(loss_sum) backward will get) lets the lm_head + cross-entropy compute
  // its gradients in the forward pass (one lm_head GEMM fewer); results are the same.
  virtual LossResult loss(const TrainBatch& batch, bool recompute, double grad_scale_hint = 0) = 0;
  // The training forward up to the final norm: [B·T, C] hidden states of every position,
  // recorded for backward (what loss() feeds its lm_head + cross-entropy; the preference stages
  // feed ops::sequence_logprobs with lm_head_weight()). recompute and LoRA dropout as loss().
  virtual Tensor hidden_states(const TrainBatch& batch, bool recompute);
  // Pipeline parallelism (train/pipeline.h): the training forward of one pipeline stage — decoder
  // layers [begin, end) over `input` ([B·T, C], the previous stage's output; undefined on the
  // first stage, which starts from the embedding), then the final norm when `end` is the last
  // layer. A stage boundary carries the residual stream as one tensor. recompute and LoRA dropout
  // as loss() (each stage draws the call's dropout seed from batch.dropout_rng, so stages fed the
  // same generator state apply one process's masks). The default throws NotImplemented.
  virtual Tensor hidden_states_range(const TrainBatch& batch, const Tensor& input, int64_t begin, int64_t end,
                                     bool recompute);
  // The output projection [V, C] (the embedding when tied), and its quantised form for
  // inference (the quantize_weights pass, models/passes.h): forward then multiplies by q; a
  // separate lm_head's dense weight is dropped, a tied embedding stays for the lookup. Training
  // (loss) refuses a quantised lm_head.
  // (The defaults are for models without an lm_head to quantise: test doubles.)
  virtual const Tensor& lm_head_weight() const;
  virtual void set_lm_head_quantized(ops::QuantizedWeight q);
  virtual const ops::QuantizedWeight& lm_head_quantized() const;
  // Vocabulary resizing (models/resize_vocab.h): replaces the embedding with embed [V', C] and,
  // when lm_head is defined, the output projection with it (untying a tied model); config()'s
  // vocab_size (and tie_word_embeddings) follow. The default throws NotImplemented.
  virtual void set_vocab_weights(Tensor embed, Tensor lm_head);

  // Data parallelism's gradient buckets (train/grad_buckets.h): during a training backward,
  // hook(i) is called once backward has left decoder layer i — every op of the layer has run its
  // backward, so its parameters' gradients of this backward are complete — in descending layer
  // order (a layer whose input needs no gradient, e.g. the first with a frozen embedding, is not
  // reported). Empty: nothing is called.
  void set_layer_backward_hook(std::function<void(int64_t)> hook) { layer_backward_hook_ = std::move(hook); }
  // ZeRO-3's just-in-time parameters (train/param_shards.h): before_forward(i) / after_forward(i)
  // are called around decoder layer i in every forward through the layers (any grad mode: the
  // layer reads its parameters only in between); before_backward(i) in a training backward just
  // before backward enters layer i (its output's gradient is complete), so a recompute re-run or a
  // saved graph finds its parameters; the layer-backward hook above reports leaving it. Layer -1
  // is the token embedding (forward hooks around the lookup, before_backward as backward reaches
  // it; nothing reports leaving it). kHeadLayer: loss()'s lm_head — before_backward as backward
  // starts at its output where the loss reads no weight in backward (eager gradients), else
  // after_forward once the loss is computed. Empty functions are not called.
  static constexpr int64_t kHeadLayer = -2;
  struct LayerHooks {
    std::function<void(int64_t)> before_forward, after_forward, before_backward;
  };
  void set_layer_hooks(LayerHooks hooks) { layer_hooks_ = std::move(hooks); }
  const LayerHooks& layer_hooks() const { return layer_hooks_; }

  // Tensor parallelism (nn/tensor_parallel.h): the group the training forwards (loss,
  // hidden_states, hidden_states_range) split their attention and MLP over — each rank its share
  // of the heads and of the MLP's rows; inference forwards never split. nullptr: no split.
  // sequence_parallel: the stream between the split regions is cut by tokens too, and loss()
  // gives this rank's rows' share of the loss (its loss_sum and count; summed over the group they
  // are one process's), hidden_states_range takes and gives this rank's rows (train_rows of them;
  // loss_labels are theirs), and hidden_states is refused.
  // Throws ConfigError when a layer cannot be split over the group (heads, kv heads or the MLP
  // width not divisible, quantised weights, DoRA/OFT adapters). The default throws NotImplemented.
  // vocab_parallel (PaddleNLP's tensor_parallel_output): loss() splits the lm_head by vocabulary
  // rows over the group with a parallel cross-entropy (nn::vocab_parallel_loss); with a tied,
  // trained embedding only under sequence_parallel (whose embedding gradients are each rank's share).
  // attention_only (context parallelism, with sequence_parallel): only the attention splits over
  // the group, by heads; the MLPs run whole on each rank's rows, or with mlp_group (tensor beside
  // context parallelism: the group's ranks in consecutive runs of mlp_group's size, each run a
  // context shard's tensor-parallel processes) split over it, on the rows of the rank's shard.
  virtual void set_tensor_parallel(nn::Collective* group, bool sequence_parallel = false, bool vocab_parallel = false,
                                   bool attention_only = false, nn::Collective* mlp_group = nullptr);
  nn::Collective* tensor_parallel() const { return tp_; }
  nn::Collective* mlp_tensor_parallel() const { return mlp_tp_; }
  // Expert parallelism (nn/expert_parallel.h): the group the training forwards' sparse layers split
  // their experts over (each process routes its own tokens and runs its share of the experts on
  // the group's); nullptr: none. ConfigError when the model has no sparse layer or the experts do
  // not divide evenly; the default throws NotImplemented.
  virtual void set_expert_parallel(nn::Collective* group);
  bool sequence_parallel() const { return tp_ && sp_; }
  bool vocab_parallel() const { return tp_ && vp_; }
  bool attention_only_parallel() const { return tp_ && ap_; }
  // The rows a training forward of this batch holds on this process (B·T, or this rank's share
  // under sequence parallelism), and their shifted labels (shifted_labels of the batch, cut to
  // those rows): what a pipeline stage sends and its head scores.
  virtual int64_t train_rows(const TrainBatch& batch) const { return batch.input_ids.numel(); }
  virtual Tensor loss_labels(const TrainBatch& batch) const;
  // The parameters whose gradient on a rank of the group is that rank's own share (its blocks of
  // the split weights and their adapters, the q/k norms); every other trainable parameter gets
  // the same whole gradient on each rank of the group.
  virtual std::vector<const Tensor*> tensor_parallel_tensors() const { return {}; }
  // Each linear a training forward splits under the current set_tensor_parallel, with the group
  // it is split over: every projection's under tensor parallelism; under context parallelism the
  // attention's over the whole group and the MLPs' over mlp_group (none alone: they run whole).
  // A frozen one may be held as its block for that group (train/tp_blocks.h).
  struct SplitLinear {
    nn::FusedLinear* linear;
    nn::Collective* group;
    int64_t layer;  // the decoder layer it is in (LayerHooks's index)
  };
  virtual std::vector<SplitLinear> split_linears() { return {}; }
  // Mixture-of-depths models (models/mixture_of_depths.h): the training forwards counted so far,
  // which set the routed layers' capacity; a checkpoint keeps it so a resumed run routes as the
  // uninterrupted one. 0 for other models.
  virtual int64_t mod_calls() const { return 0; }
  virtual void set_mod_calls(int64_t) {}

  // Convenience: logits for every position of one sequence, with a temporary one-block
  // cache. ids: token ids; returns f32 [T, V]. A mixture-of-depths model routes each layer's
  // top tokens of the whole sequence, which no KV cache keeps: its logits come from the training
  // forward without gradients (hidden_states, then project_to_vocab), as the package scores a
  // sequence.
  Tensor logits_all(const std::vector<int32_t>& ids);
  // Final hidden states [M, C] (hidden_states' output) to f32 logits [M, V] through the output
  // projection (the quantised lm_head where the model has one).
  Tensor project_to_vocab(const Tensor& hidden);

  // ---- LoRA adapters (PEFT semantics). Adapter weights are f32 parameters that require grad,
  // listed by module().parameters() (ParamRef::adapter = name) but not by named_parameters().
  // Adds adapter `name` on every linear the config targets (A from rng, B zero); ConfigError
  // for a duplicate name, an invalid config or targets that match no module. Does not change
  // the active set.
  void add_lora(const std::string& name, const nn::LoraConfig& config, Rng& rng);
  // PEFT's set_adapter: the adapters forward/loss apply when the batch does not say; every
  // name must exist (ConfigError listing the adapters otherwise).
  void set_active_adapters(std::vector<std::string> names);
  const std::vector<std::string>& active_adapters() const { return active_; }
  std::vector<std::string> adapter_names() const;
  bool has_adapter(const std::string& name) const { return adapters_.count(name) > 0; }
  const nn::LoraConfig& adapter_config(const std::string& name) const;
  // Every FusedLinear holding adapter `name`, with its module prefix ("model.layers.0.mlp.").
  std::vector<std::pair<std::string, nn::FusedLinear*>> adapter_modules(const std::string& name);
  // Removes the adapter (and drops it from the active set).
  void delete_adapter(const std::string& name);
  // Folds scaling · B · A into the base weights (one rounding) and deletes the adapter.
  void merge_adapter(const std::string& name);

 protected:
  std::function<void(int64_t)> layer_backward_hook_;
  LayerHooks layer_hooks_;
  nn::Collective* tp_ = nullptr;
  nn::Collective* ep_ = nullptr;  // expert parallelism (set_expert_parallel)
  nn::Collective* mlp_tp_ = nullptr;  // tensor beside context parallelism: the MLPs' group
  bool sp_ = false, vp_ = false, ap_ = false;
  // The LoRA state of one call: the requested (or active) adapters, validated.
  std::shared_ptr<const nn::LoraRun> lora_run(const std::optional<std::vector<std::string>>& req,
                                              Rng* dropout_rng) const;
  // The LoRA state of an inference call with per-row adapters (ForwardBatch::adapter_rows).
  std::shared_ptr<const nn::LoraRun> lora_run(const std::vector<ForwardBatch::AdapterRows>& rows) const;

 private:
  std::map<std::string, nn::LoraConfig> adapters_;
  std::vector<std::string> active_;
};

// A batch's labels [B, T] shifted left by one within each row, flattened to [B·T]: position t is
// scored against labels[t + 1]; the last position of each row gets −100.
Tensor shifted_labels(const Tensor& labels);

// Builds the model named by dir/config.json (`model_type` / `architectures`) with zero weights
// (lazy: its matrices hold no memory yet, nn::ParamPlacement::lazy).
std::unique_ptr<CausalLM> build_causal_lm(const ModelConfig& config, DType weight_dtype,
                                          Device device = {}, bool lazy = false);
// Builds and loads weights; throws ConfigError/IoError naming the file and key on bad input
// (missing tensor, wrong shape, pickled checkpoint, unknown model_type).
std::unique_ptr<CausalLM> load_causal_lm(const std::string& dir, const LoadOptions& options = {});
// load_causal_lm in two steps, for a caller that places the parameters between them (ZeRO-3's
// policy, loaded straight into its shards): the model of dir built as load_causal_lm builds it
// (options.lazy: its matrices without memory), then its weights read (before_copy with each).
// Not for inference bundles, whose quantised layers are attached while building.
std::unique_ptr<CausalLM> build_for_load(const std::string& dir, const LoadOptions& options);
void read_weights(CausalLM& model, const std::string& dir, const LoadOptions& options);

// A batch for one sequence whose first `past` tokens are already in a cache laid out as
// consecutive slots 0.. in block 0..: positions past..past+T-1, all T logits unless last_only.
ForwardBatch single_sequence_batch(const std::vector<int32_t>& ids, int64_t past,
                                   const std::vector<int32_t>& block_table, int64_t block_size,
                                   bool last_only);

}  // namespace unillm::models
