// Llama-family forward.
#include "models/llama.h"

#include <algorithm>
#include <cstdint>

#include "autograd/backward_hook.h"
#include "autograd/grad_mode.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/gather.h"
#include "nn/recompute.h"
#include "ops/cross_entropy.h"
#include "ops/linear.h"
#include "ops/quant.h"
#include "ops/shape.h"
#include "ops/take.h"
#include "models/mixture_of_depths.h"

namespace unillm::models {

namespace {
nn::AttentionConfig attention_config(const ModelConfig& c, nn::ParamPlacement wd) {
  nn::AttentionConfig a;
  a.hidden = c.hidden_size;
  a.heads = c.num_heads;
  a.kv_heads = c.num_kv_heads;
  a.head_dim = c.head_dim;
  a.qkv_bias = c.attention_bias;
  a.o_bias = c.o_bias;
  a.qk_norm = c.qk_norm;
  a.norm_eps = c.rms_norm_eps;
  const double m = ops::rope_attention_factor(c.rope);  // YaRN scales q and k by m
  a.score_scale = m * m;
  a.weight_dtype = wd.dtype;
  a.device = wd.device;
  a.lazy_weights = wd.lazy;
  return a;
}
}  // namespace

DecoderLayer::DecoderLayer(const ModelConfig& c, int64_t index, nn::ParamPlacement wd)
    : input_norm_(c.hidden_size, c.rms_norm_eps, wd.device),
      post_attn_norm_(c.hidden_size, c.rms_norm_eps, wd.device),
      attn_(attention_config(c, wd)),
      index_(index) {
  auto add_module = [&](const std::string& name, nn::Module* m) {
    if (c.mod_layer(index))
      block_.register_module(name, m);
    else
      register_module(name, m);
  };
  add_module("input_layernorm", &input_norm_);
  add_module("self_attn", &attn_);
  add_module("post_attention_layernorm", &post_attn_norm_);
  if (c.sparse_layer(index)) {
    moe_ = std::make_unique<nn::SparseMoE>(
        nn::MoeConfig{c.hidden_size, c.num_experts, c.num_experts_per_tok, c.moe_intermediate_size,
                      c.shared_expert_intermediate_size, c.norm_topk_prob},
        wd);
    add_module("mlp", moe_.get());
  } else {
    mlp_ = std::make_unique<nn::MLP>(c.hidden_size, c.intermediate_size, c.mlp_bias, wd);
    add_module("mlp", mlp_.get());
  }
  if (c.mod_layer(index)) {
    if (moe_)
      UNILLM_THROW(NotImplemented, "[llama] mixture-of-depths over a mixture-of-experts layer (", c.model_type,
                   ") is not implemented; dense models only");
    // The package runs its router in f32 whatever the model's dtype; HF lists it before the block.
    router_w_ = nn::placed_matrix({1, c.hidden_size}, nn::ParamPlacement(DType::f32, wd.device, wd.lazy));
    router_b_ = Tensor::zeros({1}, DType::f32, wd.device);
    register_parameter("router.weight_predictor.weight", &router_w_);
    register_parameter("router.weight_predictor.bias", &router_b_);
    register_module("block", &block_);
  }
}

Tensor DecoderLayer::feed_forward(const Tensor& h, const nn::AttentionInputs& in, ops::OutputUse use,
                                  const nn::TensorParallel* tp) const {
  // A sparse layer's value is always computed: its combine's backward reads the experts' outputs.
  // A recompute re-run (kGradOnly) does not record its routing in the balance again.
  // Expert parallelism is a training split (tp is null for the inference forwards).
  if (moe_) return moe_->forward(h, in.lora.get(), in.moe_balance, use == ops::OutputUse::kValue, tp ? in.experts : nullptr);
  // Context parallelism runs the MLP whole on the rank's rows, or over its own tensor-parallel group.
  const nn::TensorParallel* split = !tp                 ? nullptr
                                    : !tp->attention_only ? tp
                                    : in.mlp_tp.active()  ? &in.mlp_tp
                                                          : nullptr;
  // Under context parallelism the dense MLP's adapters draw their rows' dropout masks.
  return mlp_->forward(h, tp && in.mlp_lora ? in.mlp_lora.get() : in.lora.get(), use, split);
}

Tensor DecoderLayer::attention_block(const Tensor& x, const nn::AttentionInputs& in,
                                     ops::OutputUse use, nn::AttentionStash* stash) const {
  return ops::add(x, attn_.forward(input_norm_.forward(x), in, {}, use, stash));
}

Tensor DecoderLayer::mlp_block(const Tensor& h, const nn::AttentionInputs& in,
                               ops::OutputUse use) const {
  return ops::add(h, feed_forward(post_attn_norm_.forward(h), in, use, &in.tp));
}

DecoderLayer::Stream DecoderLayer::forward(const Stream& x, const nn::AttentionInputs& in,
                                           nn::LayerCache cache) const {
  ops::AddRmsNormResult a =
      x.delta.defined() ? input_norm_.add_forward(x.sum, x.delta) : ops::AddRmsNormResult{x.sum, input_norm_.forward(x.sum)};
  ops::AddRmsNormResult h = post_attn_norm_.add_forward(a.sum, attn_.forward(a.y, in, cache));
  return {h.sum, feed_forward(h.y, in, ops::OutputUse::kValue, cache.k ? nullptr : &in.tp)};
}

void DecoderLayer::check_split(int attention_size, int mlp_size) const {
  attn_.check_split(attention_size);
  if (mlp_size == 1) return;
  if (moe_) moe_->check_split(mlp_size);
  if (mlp_) mlp_->check_split(mlp_size);
}

bool DecoderLayer::check_experts_split(int size) const {
  if (moe_) moe_->check_experts_split(size);
  return moe_ != nullptr;
}

void DecoderLayer::split_tensors(std::vector<const Tensor*>& out) const {
  attn_.split_tensors(out);
  if (mlp_) mlp_->split_tensors(out);
}

void DecoderLayer::split_linears(std::vector<CausalLM::SplitLinear>& out, nn::Collective* attention,
                                 nn::Collective* mlp) {
  std::vector<nn::FusedLinear*> linears;
  attn_.split_linears(linears);
  for (nn::FusedLinear* l : linears) out.push_back({l, attention, index_});
  if (!mlp_ || !mlp) return;  // a sparse layer's experts are never split by tensor parallelism
  linears.clear();
  mlp_->split_linears(linears);
  for (nn::FusedLinear* l : linears) out.push_back({l, mlp, index_});
}

namespace {
bool any_requires_grad(nn::Module& m) {
  for (auto& p : m.parameters())
    if (p.tensor->requires_grad()) return true;
  return false;
}
}  // namespace

bool DecoderLayer::attention_params_need_grad() {
  return any_requires_grad(input_norm_) || any_requires_grad(attn_);
}

bool DecoderLayer::mlp_params_need_grad() {
  return any_requires_grad(post_attn_norm_) || (mlp_ ? any_requires_grad(*mlp_) : any_requires_grad(*moe_));
}

Llama::Llama(const ModelConfig& c, nn::ParamPlacement wd)
    : c_(c), device_(wd.device), norm_(c.hidden_size, c.rms_norm_eps, wd.device) {
  ops::RopeConfig rope = c.rope;
  inv_freq_ = ops::rope_inv_freq(rope);
  embed_ = nn::placed_matrix({c.vocab_size, c.hidden_size}, wd);
  model_.register_parameter("embed_tokens.weight", &embed_);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    layers_.push_back(std::make_unique<DecoderLayer>(c, l, wd));
    model_.register_module("layers." + std::to_string(l), layers_.back().get());
  }
  model_.register_module("norm", &norm_);
  register_module("model", &model_);
  if (!c.tie_word_embeddings) {
    lm_head_ = nn::placed_matrix({c.vocab_size, c.hidden_size}, wd);
    register_parameter("lm_head.weight", &lm_head_);
  }
}

DecoderLayer::Stream Llama::layers(Tensor x, const nn::AttentionInputs& in, KvCaches* caches, bool recompute,
                                   size_t begin, size_t end) {
  end = std::min(end, layers_.size());
  // Marks each layer's input for layer_backward_hook_ (training only: grad mode on).
  const bool hook = layer_backward_hook_ && autograd::grad_enabled();
  auto mark = [this](std::vector<Tensor> xs, size_t i) {
    return autograd::on_backward(xs, [this, i] { layer_backward_hook_(static_cast<int64_t>(i)); });
  };
  // ZeRO-3 (set_layer_hooks): around each layer's forward, and a marker on its output whose
  // backward runs just before the layer's.
  const LayerHooks& lh = layer_hooks_;
  const bool entering = lh.before_backward && autograd::grad_enabled();
  auto around = [&lh](const std::function<void(int64_t)>& f, size_t i) {
    if (f) f(static_cast<int64_t>(i));
  };
  auto mark_entry = [&lh](std::vector<Tensor> xs, size_t i) {
    return autograd::on_backward(xs, [f = lh.before_backward, i] { f(static_cast<int64_t>(i)); });
  };
  if (c_.mixture_of_depths) {
    if (caches)
      UNILLM_THROW(NotImplemented, "[llama] generation with a mixture-of-depths model is not implemented (the "
                   "package's decoding caches only each routed layer's selected tokens); it trains and evaluates");
    // The package's training_step: once per training forward (every routed layer counts alike).
    bool routed = false;
    for (size_t i = begin; i < end; ++i) routed = routed || layers_[i]->is_mod();
    if (routed && autograd::grad_enabled()) {
      mod_calls_ = mod_next_calls(mod_calls_);
      mod_capacity_ = mod_capacity(mod_calls_);
    }
  }
  if (!recompute) {
    DecoderLayer::Stream stream{x, Tensor()};
    for (size_t i = begin; i < end; ++i) {
      if (hook) {
        auto m = mark({stream.sum, stream.delta}, i);
        stream = {m[0], m[1]};
      }
      around(lh.before_forward, i);
      if (layers_[i]->is_mod())
        stream = mod_layer(i, stream, in);
      else
        stream = layers_[i]->forward(stream, in, caches ? nn::LayerCache{&caches->k[i], &caches->v[i]} : nn::LayerCache{});
      around(lh.after_forward, i);
      if (entering) {
        auto m = mark_entry({stream.sum, stream.delta}, i);
        stream = {m[0], m[1]};
      }
    }
    return stream;
  }
  for (size_t i = begin; i < end; ++i) {
    DecoderLayer* l = layers_[i].get();
    if (hook) x = mark({x}, i)[0];
    around(lh.before_forward, i);
    if (l->is_mod()) {  // not recomputed: a re-run would route again (activations kept instead)
      x = mod_layer(i, {x, Tensor()}, in).sum;
      around(lh.after_forward, i);
      if (entering) x = mark_entry({x}, i)[0];
      continue;
    }
    // Two segments per layer, saving x and h (2 × [N, C] per layer instead of 1): the re-run of
    // each then ends in a projection whose output value backward never reads, and skips its GEMM
    // (o_proj, down_proj: ~30% of a layer's re-run GEMM FLOPs at Llama shapes). The attention
    // segment also keeps the attention's out and lse ([N, H·D] + [N, H]), so its re-run does not
    // run the attention forward again (a third of the attention's cost with recompute).
    auto stash = std::make_shared<nn::AttentionStash>();
    x = nn::recompute(
        [l, in, stash](const Tensor& a, ops::OutputUse use) {
          return l->attention_block(a, in, use, stash.get());
        },
        x, l->attention_params_need_grad());
    x = nn::recompute(
        [l, in](const Tensor& h, ops::OutputUse use) { return l->mlp_block(h, in, use); }, x,
        l->mlp_params_need_grad());
    around(lh.after_forward, i);
    if (entering) x = mark_entry({x}, i)[0];
  }
  return {x, Tensor()};
}

Tensor Llama::forward(const ForwardBatch& b, KvCaches& caches) {
  UNILLM_CHECK(static_cast<int64_t>(caches.k.size()) == c_.num_layers, "[llama] cache has wrong layer count");
  nn::AttentionInputs in;
  in.positions = b.positions;
  in.inv_freq = rope_table(b.positions);
  in.lora = b.adapter_rows.empty() ? lora_run(b.adapters, nullptr) : lora_run(b.adapter_rows);
  in.slot_mapping = b.slot_mapping;
  in.batch = &b.attn;
  Tensor x = final_norm(layers(embed(b.ids), in, &caches, false), b.logit_rows);  // [M, C]
  if (lm_head_q_.defined()) return ops::linear_q(x, lm_head_q_);  // [M, V]
  return ops::linear(x, lm_head());  // [M, V]
}

const std::vector<float>* Llama::rope_table(const Tensor& positions) const {
  if (c_.rope.scaling_type != "dynamic" || !positions.defined() || positions.numel() == 0) return &inv_freq_;
  const Tensor host = positions.to(Device{}).contiguous();
  const int32_t* p = host.data<int32_t>();
  const int64_t seq_len = *std::max_element(p, p + host.numel()) + int64_t{1};  // HF: max(position_ids) + 1
  if (seq_len <= c_.rope.max_position) return &inv_freq_;
  std::lock_guard<std::mutex> lock(dynamic_mutex_);
  auto it = dynamic_tables_.find(seq_len);
  if (it == dynamic_tables_.end()) it = dynamic_tables_.emplace(seq_len, ops::rope_inv_freq(c_.rope, seq_len)).first;
  return &it->second;
}

Tensor Llama::embed(const Tensor& ids, const TrainBatch* train, int64_t first_row) {
  const LayerHooks& lh = layer_hooks_;
  if (lh.before_forward) lh.before_forward(-1);
  Tensor x = ops::embedding(ids, embed_);
  if (train && train->neftune_alpha > 0)  // the noise carries no gradient; x's passes through
    x = ops::add(x, neftune_noise(*train, first_row, first_row + ids.numel(), c_.hidden_size)
                        .to(x.dtype())
                        .to(x.device()));
  if (lh.after_forward) lh.after_forward(-1);
  if (lh.before_backward && autograd::grad_enabled())
    x = autograd::on_backward({x}, [f = lh.before_backward] { f(-1); })[0];
  return x;
}

Tensor Llama::final_norm(DecoderLayer::Stream stream, const Tensor& rows) const {
  if (rows.defined()) {  // only the sampled rows go on: gather both parts of the stream
    stream.sum = ops::gather_rows(stream.sum, rows);
    if (stream.delta.defined()) stream.delta = ops::gather_rows(stream.delta, rows);
  }
  return stream.delta.defined() ? norm_.add_forward(stream.sum, stream.delta).y : norm_.forward(stream.sum);
}

void Llama::set_lm_head_quantized(ops::QuantizedWeight q) {
  q.check("lm_head");
  if (q.n != c_.vocab_size || q.k != c_.hidden_size)
    UNILLM_THROW(ShapeError, "[llama] quantised lm_head of [", q.n, ", ", q.k, "], expected [", c_.vocab_size, ", ",
                 c_.hidden_size, "]");
  lm_head_q_ = std::move(q);
  if (!c_.tie_word_embeddings && lm_head_.defined()) {
    unregister_parameter(&lm_head_);
    lm_head_ = Tensor();
  }
}


LossResult Llama::loss(const TrainBatch& batch, bool recompute, double grad_scale_hint) {
  if (lm_head_q_.defined())
    UNILLM_THROW(ConfigError, "[llama] training through a quantised lm_head is not supported (load the model without --quant_type)");
  const nn::AttentionInputs in = train_inputs(batch);
  Tensor x = train_hidden(batch, in, recompute);  // [N, C], or this rank's rows
  // ZeRO-3's head unit (LayerHooks, kHeadLayer): a loss that holds its gradients from the forward
  // reads no weight in backward, so the lm_head may go as backward starts (a marker on the
  // loss); any other keeps it and takes its gradient buffer now.
  auto head_done = [this](Tensor loss_sum, bool eager) {
    const LayerHooks& lh = layer_hooks_;
    if (!autograd::grad_enabled()) return loss_sum;
    if (!eager) {
      if (lh.after_forward) lh.after_forward(kHeadLayer);
      return loss_sum;
    }
    if (!lh.before_backward) return loss_sum;
    return autograd::on_backward({loss_sum}, [f = lh.before_backward] { f(kHeadLayer); })[0];
  };
  if (vocab_parallel()) {  // every row's labels: the lm_head's vocabulary split sees every token
    auto ce = nn::vocab_parallel_loss(x, lm_head(), shifted_labels(batch.labels), in.tp, grad_scale_hint);
    return {head_done(ce.loss_sum, false), ce.count};
  }
  auto ce = ops::linear_cross_entropy_eager_grad(x, lm_head(), loss_labels(batch), grad_scale_hint);
  return {head_done(ce.loss_sum, ce.eager), ce.count};
}

nn::AttentionInputs Llama::train_inputs(const TrainBatch& batch) const {
  const int64_t b = batch.input_ids.size(0), t = batch.input_ids.size(1);
  nn::AttentionInputs in;
  in.positions = batch.position_ids.contiguous().view({b * t});
  in.inv_freq = rope_table(in.positions);
  in.lora = lora_run(batch.adapters, batch.dropout_rng);
  in.rows = b;
  in.tokens = t;
  // Once per call on the model's device (the attention of every layer reads them).
  in.segment_ids = batch.segment_ids.defined() ? batch.segment_ids.to(device_) : Tensor();
  in.tp = {tp_, sp_, b * t, ap_, mlp_tp_ ? mlp_tp_->size() : 1};
  if (mlp_tp_) {  // the rows of this rank's context shard: its run's rows
    const int nest = mlp_tp_->size(), first = tp_->rank() / nest * nest;
    in.mlp_tp = {mlp_tp_, true, in.tp.rows_of(first + nest - 1).second - in.tp.rows_of(first).first};
  }
  if (ap_ && in.lora && in.lora->dropout) {  // the MLPs see this rank's rows, or its shard's
    auto lora = std::make_shared<nn::LoraRun>(*in.lora);
    lora->mask_row_begin = mlp_tp_ ? in.tp.rows_of(tp_->rank() / mlp_tp_->size() * mlp_tp_->size()).first : in.tp.rows().first;
    in.mlp_lora = std::move(lora);
  }
  if (batch.shift_attn_ratio > 0)
    in.shift = nn::make_shifted_groups(b, t, batch.shift_attn_ratio, batch.segment_ids, batch.row_lengths, device_);
  in.moe_balance = batch.moe_balance;
  in.experts = ep_;
  return in;
}

void Llama::set_tensor_parallel(nn::Collective* group, bool sequence_parallel, bool vocab_parallel,
                                bool attention_only, nn::Collective* mlp_group) {
  const bool nested = mlp_group && mlp_group->size() > 1;
  if (group && group->size() > 1) {
    if (attention_only && !sequence_parallel)
      UNILLM_THROW(ConfigError, "[llama] splitting the attention alone (context parallelism) needs the tokens split too");
    if (nested && (!attention_only || group->size() % mlp_group->size() != 0 || vocab_parallel))
      UNILLM_THROW(ConfigError, "[llama] an MLP group of ", mlp_group->size(), " needs context parallelism over a "
                   "multiple of it (", group->size(), ") and a whole lm_head");
    for (const auto& l : layers_)
      l->check_split(group->size(), !attention_only ? group->size() : nested ? mlp_group->size() : 1);
    if (vocab_parallel && c_.tie_word_embeddings && !sequence_parallel && embed_.requires_grad())
      UNILLM_THROW(ConfigError, "[llama] a vocabulary-parallel lm_head (tensor_parallel_output) tied to a trained "
                   "embedding needs sequence_parallel: without it the embedding's lookup gradient is computed "
                   "whole on every process while the lm_head's is each one's share");
    if (vocab_parallel && c_.vocab_size < group->size())
      UNILLM_THROW(ConfigError, "[llama] a vocabulary of ", c_.vocab_size, " cannot be split over ", group->size(),
                   " processes");
  }
  tp_ = group && group->size() > 1 ? group : nullptr;
  sp_ = tp_ && sequence_parallel;
  vp_ = tp_ && vocab_parallel;
  ap_ = tp_ && attention_only;
  mlp_tp_ = tp_ && nested ? mlp_group : nullptr;
}

void Llama::set_expert_parallel(nn::Collective* group) {
  if (group && group->size() > 1) {
    bool sparse = false;
    for (const auto& l : layers_) sparse = l->check_experts_split(group->size()) || sparse;
    if (!sparse)
      UNILLM_THROW(ConfigError, "[llama] expert parallelism needs a mixture-of-experts model; this ", c_.model_type,
                   " model has no sparse layer");
  }
  ep_ = group && group->size() > 1 ? group : nullptr;
}

int64_t Llama::train_rows(const TrainBatch& batch) const {
  if (!sequence_parallel()) return batch.input_ids.numel();
  const auto [lo, hi] = nn::TensorParallel{tp_, true, batch.input_ids.numel(), ap_, mlp_tp_ ? mlp_tp_->size() : 1}.rows();
  return hi - lo;
}

Tensor Llama::loss_labels(const TrainBatch& batch) const {
  Tensor labels = shifted_labels(batch.labels);
  if (!sequence_parallel()) return labels;
  return ops::take_rows(labels, {nn::TensorParallel{tp_, true, labels.numel(), ap_, mlp_tp_ ? mlp_tp_->size() : 1}.rows()});
}

void Llama::refuse_sequence_parallel(const char* what) const {
  if (sp_)
    UNILLM_THROW(NotImplemented, "[llama] ", what, " under sequence parallelism is not implemented (each "
                 "process holds only its rows of the hidden states; the token loss of pt and sft runs)");
}

Tensor Llama::train_hidden(const TrainBatch& batch, const nn::AttentionInputs& in, bool recompute) {
  Tensor ids = batch.input_ids.contiguous().view({batch.input_ids.numel()});
  int64_t first = 0;
  if (in.tp.sequence) {  // this rank's tokens only, from the embedding to the final norm
    const auto [lo, hi] = in.tp.rows();
    ids = ids.slice(0, lo, hi).contiguous();
    first = lo;
  }
  return final_norm(layers(embed(ids, &batch, first), in, nullptr, recompute), Tensor());
}

std::vector<const Tensor*> Llama::tensor_parallel_tensors() const {
  std::vector<const Tensor*> out;
  for (const auto& l : layers_) l->split_tensors(out);
  if (vp_) out.push_back(&lm_head());  // each rank's vocabulary rows
  return out;
}

std::vector<CausalLM::SplitLinear> Llama::split_linears() {
  std::vector<SplitLinear> out;
  if (!tp_) return out;
  nn::Collective* mlp = ap_ ? mlp_tp_ : tp_;  // context parallelism: the MLPs over their own group, or whole
  for (auto& l : layers_) l->split_linears(out, tp_, mlp);
  return out;
}

Tensor Llama::hidden_states(const TrainBatch& batch, bool recompute) {
  refuse_sequence_parallel("hidden_states (a loss other than the token loss)");
  return train_hidden(batch, train_inputs(batch), recompute);  // [N, C]
}

Tensor Llama::hidden_states_range(const TrainBatch& batch, const Tensor& input, int64_t begin, int64_t end,
                                  bool recompute) {
  if (begin < 0 || end > c_.num_layers || begin >= end)
    UNILLM_THROW(ShapeError, "[llama] pipeline stage of layers [", begin, ", ", end, ") of ", c_.num_layers);
  const nn::AttentionInputs in = train_inputs(batch);
  // Under sequence parallelism a stage holds this rank's rows, from the embedding on.
  const int64_t n = train_rows(batch);
  Tensor ids = batch.input_ids.contiguous().view({batch.input_ids.numel()});
  if (in.tp.sequence) ids = ids.slice(0, in.tp.rows().first, in.tp.rows().second).contiguous();
  Tensor x = begin == 0 ? embed(ids, &batch, in.tp.sequence ? in.tp.rows().first : 0) : input;
  if (!x.defined() || x.ndim() != 2 || x.size(0) != n || x.size(1) != c_.hidden_size)
    UNILLM_THROW(ShapeError, "[llama] pipeline stage from layer ", begin, ": input of [", n, ", ", c_.hidden_size,
                 "] expected");
  DecoderLayer::Stream s = layers(x, in, nullptr, recompute, static_cast<size_t>(begin), static_cast<size_t>(end));
  if (end == c_.num_layers) return final_norm(s, Tensor());  // [N, C]
  return s.delta.defined() ? ops::add(s.sum, s.delta) : s.sum;  // the stream as one tensor
}

}  // namespace unillm::models
