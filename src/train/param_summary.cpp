// What a fine-tuning choice trains, counted from the config without building the model (see
// memory_plan.h, summarize_params): the base tensors Llama builds, which of them train under
// full / freeze / LoRA / OFT, and what each decoder layer then keeps for backward.
#include <algorithm>

#include "core/error.h"
#include "models/freeze.h"
#include "nn/lora.h"
#include "train/finetune.h"
#include "train/memory_plan.h"

namespace unillm::train {

namespace {

enum class Kind { kEmbed, kQkv, kO, kGateUp, kDown, kFinalNorm, kLmHead, kOther };

// One real (possibly fused) base tensor: its HF names, elements, layer (-1: none) and kind.
struct Group {
  std::vector<std::string> names;
  int64_t numel = 0;
  int64_t layer = -1;
  Kind kind = Kind::kOther;
};

// A layer's SwiGLU MLPs as (module prefix under "mlp.", width): the dense one, or a sparse
// layer's experts and shared expert (nn/moe.cpp).
std::vector<std::pair<std::string, int64_t>> ffn_modules(const models::ModelConfig& c, int64_t l) {
  if (!c.sparse_layer(l)) return {{"", c.intermediate_size}};
  std::vector<std::pair<std::string, int64_t>> out;
  for (int64_t e = 0; e < c.num_experts; ++e) out.push_back({"experts." + std::to_string(e) + ".", c.moe_intermediate_size});
  if (c.shared_expert_intermediate_size > 0) out.push_back({"shared_expert.", c.shared_expert_intermediate_size});
  return out;
}

// The base parameters Llama builds (models/llama.cpp, nn/attention.cpp, nn/mlp.cpp, nn/moe.cpp), as fused.
std::vector<Group> inventory(const models::ModelConfig& c) {
  const int64_t C = c.hidden_size, F = c.intermediate_size, V = c.vocab_size;
  const int64_t q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  std::vector<Group> g;
  g.push_back({{"model.embed_tokens.weight"}, V * C, -1, Kind::kEmbed});
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const std::string a = p + "self_attn.", m = p + "mlp.";
    g.push_back({{p + "input_layernorm.weight"}, C, l, Kind::kOther});
    g.push_back({{a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"}, (q + 2 * kv) * C, l, Kind::kQkv});
    if (c.attention_bias) g.push_back({{a + "q_proj.bias", a + "k_proj.bias", a + "v_proj.bias"}, q + 2 * kv, l, Kind::kOther});
    g.push_back({{a + "o_proj.weight"}, C * q, l, Kind::kO});
    if (c.o_bias) g.push_back({{a + "o_proj.bias"}, C, l, Kind::kOther});
    if (c.qk_norm) {
      g.push_back({{a + "q_norm.weight"}, c.head_dim, l, Kind::kOther});
      g.push_back({{a + "k_norm.weight"}, c.head_dim, l, Kind::kOther});
    }
    g.push_back({{p + "post_attention_layernorm.weight"}, C, l, Kind::kOther});
    if (c.sparse_layer(l)) {  // nn/moe.cpp: the router, each expert's MLP, the shared expert
      g.push_back({{m + "gate.weight"}, c.num_experts * C, l, Kind::kOther});
      for (const auto& [e, f] : ffn_modules(c, l)) {
        g.push_back({{m + e + "gate_proj.weight", m + e + "up_proj.weight"}, 2 * f * C, l, Kind::kGateUp});
        g.push_back({{m + e + "down_proj.weight"}, C * f, l, Kind::kDown});
      }
      if (c.shared_expert_intermediate_size > 0) g.push_back({{m + "shared_expert_gate.weight"}, C, l, Kind::kOther});
      continue;
    }
    g.push_back({{m + "gate_proj.weight", m + "up_proj.weight"}, 2 * F * C, l, Kind::kGateUp});
    if (c.mlp_bias) g.push_back({{m + "gate_proj.bias", m + "up_proj.bias"}, 2 * F, l, Kind::kOther});
    g.push_back({{m + "down_proj.weight"}, C * F, l, Kind::kDown});
    if (c.mlp_bias) g.push_back({{m + "down_proj.bias"}, C, l, Kind::kOther});
  }
  g.push_back({{"model.norm.weight"}, C, -1, Kind::kFinalNorm});
  if (!c.tie_word_embeddings) g.push_back({{"lm_head.weight"}, V * C, -1, Kind::kLmHead});
  return g;
}

// Marks trainable groups per finetuning_type (finetune.cpp): full = all, freeze = LLaMA-Factory's
// name rules (a fused tensor trains when all its names are selected), lora = none.
std::vector<bool> base_trainable(const std::vector<Group>& groups, const models::ModelConfig& c,
                                 const TrainArgs& a) {
  std::vector<bool> t(groups.size(), a.finetuning_type == "full");
  if (a.finetuning_type == "full" && a.use_badam)  // BAdam trains decoder layers only (badam.h)
    for (size_t i = 0; i < groups.size(); ++i) t[i] = groups[i].layer >= 0;
  if (a.finetuning_type != "freeze") return t;
  std::vector<std::string> names;
  for (const auto& g : groups) names.insert(names.end(), g.names.begin(), g.names.end());
  const auto patterns = models::freeze_patterns(names, c.num_layers, freeze_config(a));
  for (size_t i = 0; i < groups.size(); ++i)
    t[i] = std::all_of(groups[i].names.begin(), groups[i].names.end(),
                       [&](const std::string& n) { return models::freeze_selects(patterns, n); });
  return t;
}

// One FusedLinear of a layer for LoRA: its module prefix, part names, in and out features.
struct Projection {
  std::string module_prefix;  // "model.layers.3.self_attn."
  std::vector<std::pair<std::string, int64_t>> parts;  // (name, out features)
  int64_t in = 0;
  Kind kind;
};

std::vector<Projection> projections(const models::ModelConfig& c, int64_t l) {
  const int64_t C = c.hidden_size;
  const int64_t q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  const std::string p = "model.layers." + std::to_string(l) + ".";
  std::vector<Projection> out = {{p + "self_attn.", {{"q_proj", q}, {"k_proj", kv}, {"v_proj", kv}}, C, Kind::kQkv},
                                 {p + "self_attn.", {{"o_proj", C}}, q, Kind::kO}};
  for (const auto& [m, f] : ffn_modules(c, l)) {
    out.push_back({p + "mlp." + m, {{"gate_proj", f}, {"up_proj", f}}, C, Kind::kGateUp});
    out.push_back({p + "mlp." + m, {{"down_proj", C}}, f, Kind::kDown});
  }
  if (c.sparse_layer(l)) {  // the routers
    out.push_back({p + "mlp.", {{"gate", c.num_experts}}, C, Kind::kOther});
    if (c.shared_expert_intermediate_size > 0) out.push_back({p + "mlp.", {{"shared_expert_gate", 1}}, C, Kind::kOther});
  }
  return out;
}

// Adds one layer's LoRA adapter (A [P·r, in], B [Σ out_p, r], f32, trainable) to s.
void add_lora_layer(const models::ModelConfig& c, const nn::LoraConfig& lc, int64_t l,
                    ParamSummary& s) {
  LayerParams& lp = s.layers[static_cast<size_t>(l)];
  for (const auto& pr : projections(c, l)) {
    int64_t parts = 0, outs = 0;
    for (const auto& [name, out] : pr.parts)
      if (nn::lora_targets(lc, pr.module_prefix + name)) ++parts, outs += out;
    if (parts == 0) continue;
    s.trainable += parts * lc.rank * pr.in + outs * lc.rank;
    lp.trainable = true;
    lp.lora_xa += parts * lc.rank;
    if (lc.dropout > 0) lp.lora_keep += parts * pr.in;
    if (pr.kind == Kind::kQkv) lp.qkv_saves_x = true;
    if (pr.kind == Kind::kGateUp) lp.gate_up_saves_x = true;
    if (pr.kind == Kind::kDown) lp.down_saves_x = true;
  }
}

// OFT (finetuning_type oft): b(b−1)/2 skew parameters per block of each targeted part; each part
// keeps its rotated input for backward (counted with LoRA's x·Aᵀ).
void add_oft_layer(const models::ModelConfig& c, const nn::LoraConfig& lc, int64_t l, ParamSummary& s) {
  LayerParams& lp = s.layers[static_cast<size_t>(l)];
  for (const auto& pr : projections(c, l)) {
    int64_t parts = 0;
    for (const auto& [name, out] : pr.parts)
      if (nn::lora_targets(lc, pr.module_prefix + name)) ++parts;
    if (parts == 0) continue;
    const nn::OftBlocks ob = nn::oft_blocks(lc.oft, pr.in);
    s.trainable += parts * ob.blocks * ob.block_size * (ob.block_size - 1) / 2;
    lp.trainable = true;
    lp.lora_xa += parts * pr.in;
    if (pr.kind == Kind::kQkv) lp.qkv_saves_x = true;
    if (pr.kind == Kind::kGateUp) lp.gate_up_saves_x = true;
    if (pr.kind == Kind::kDown) lp.down_saves_x = true;
  }
}

// The bytes ops::QuantizedWeight holds for a [rows, cols] projection under QLoRA: nf4/fp4 codes
// at 4 bits, one f32 absmax per 64-block, or with double quantisation one byte per block plus an
// f32 per 256 blocks and the offset; int8 one byte a weight and an f32 scale per row.
int64_t qlora_bytes(int64_t rows, int64_t cols, const TrainArgs& a) {
  const int64_t n = rows * cols;
  if (a.quantization_bit == 8) return n + 4 * rows;
  const int64_t blocks = (n + 63) / 64;
  const int64_t scales = a.double_quantization ? blocks + 4 * ((blocks + 255) / 256) + 4 : 4 * blocks;
  return (n + 1) / 2 + scales;
}

// Rows of a projection group (the fused output features).
int64_t projection_rows(const models::ModelConfig& c, Kind k) {
  const int64_t q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  switch (k) {
    case Kind::kQkv: return q + 2 * kv;
    case Kind::kGateUp: return 2 * c.intermediate_size;
    case Kind::kO:
    case Kind::kDown: return c.hidden_size;
    default: return 0;
  }
}

}  // namespace

ParamSummary summarize_params(const models::ModelConfig& c, const TrainArgs& a) {
  if (a.quantization_bit > 0 && !a.adapter_tuning())  // as finetune.cpp, before loading
    UNILLM_THROW(ConfigError, "[config] ", a.config_path, ": quantization_bit ", a.quantization_bit,
                 " with finetuning_type ", a.finetuning_type, ": Quantization is only compatible with the LoRA method.");
  const std::vector<Group> groups = inventory(c);
  const std::vector<bool> trains = base_trainable(groups, c, a);
  ParamSummary s;
  s.layers.resize(static_cast<size_t>(c.num_layers));
  for (size_t i = 0; i < groups.size(); ++i) {
    const Group& g = groups[i];
    s.base += g.numel;
    (trains[i] ? s.trainable : s.frozen) += g.numel;
    // A sparse layer's routed experts are expert parallelism's to split, not tensor parallelism's.
    const bool routed = g.names[0].find(".mlp.experts.") != std::string::npos;
    const bool dense_projection = (g.kind == Kind::kQkv || g.kind == Kind::kO || g.kind == Kind::kGateUp ||
                                   g.kind == Kind::kDown) && !routed &&
                                  g.names[0].find(".mlp.shared_expert.") == std::string::npos;
    if (!trains[i] && dense_projection) {
      s.frozen_split += g.numel;
      s.largest_frozen_split = std::max(s.largest_frozen_split, g.numel);
    }
    if (!trains[i] && dense_projection && (g.kind == Kind::kGateUp || g.kind == Kind::kDown)) s.frozen_split_mlp += g.numel;
    if (!trains[i] && routed) s.frozen_experts += g.numel;
    const int64_t rows = projection_rows(c, g.kind);
    if (!trains[i] && a.quantization_bit > 0 && a.adapter_tuning() && rows > 0) {
      s.quantized += g.numel;
      s.quantized_bytes += qlora_bytes(rows, g.numel / rows, a);
      s.largest_quantized = std::max(s.largest_quantized, g.numel);
    }
    if (!trains[i]) continue;
    if (g.kind == Kind::kEmbed) s.embed_trainable = true;
    if (g.kind == Kind::kLmHead || (g.kind == Kind::kEmbed && c.tie_word_embeddings)) s.lm_head_trainable = true;
    if (g.kind == Kind::kFinalNorm) s.final_norm_trainable = true;
    if (g.layer < 0) continue;
    LayerParams& lp = s.layers[static_cast<size_t>(g.layer)];
    lp.trainable = true;
    if (g.kind == Kind::kQkv) lp.qkv_saves_x = true;
    if (g.kind == Kind::kGateUp) lp.gate_up_saves_x = true;
    if (g.kind == Kind::kDown) lp.down_saves_x = true;
    if (g.kind != Kind::kOther) lp.max_weight_grad = std::max(lp.max_weight_grad, g.numel);
  }
  if (a.finetuning_type == "lora") {
    nn::LoraConfig lc;
    lc.rank = a.lora_rank;
    lc.alpha = a.lora_alpha.value_or(2.0 * static_cast<double>(a.lora_rank));
    lc.dropout = a.lora_dropout;
    lc.target_modules = a.lora_target;
    nn::validate_lora_config(lc);
    for (int64_t l = 0; l < c.num_layers; ++l) add_lora_layer(c, lc, l, s);
  }
  if (a.finetuning_type == "oft") {
    nn::LoraConfig lc;
    lc.is_oft = true;
    lc.oft.rank = a.oft_rank;
    lc.oft.block_size = a.oft_block_size;
    lc.target_modules = a.oft_target;
    nn::validate_lora_config(lc);
    for (int64_t l = 0; l < c.num_layers; ++l) add_oft_layer(c, lc, l, s);
  }
  return s;
}

}  // namespace unillm::train
