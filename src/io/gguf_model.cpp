// The Llama-family <-> GGUF conventions of llama.cpp's converter: names, keys, q/k permutation.
#include "io/gguf_model.h"

#include <cmath>
#include <cstring>

#include "core/error.h"

namespace unillm::io {

namespace {

constexpr double kPi = 3.14159265358979323846;

// HF suffix after "model.layers.N." <-> GGUF suffix after "blk.N.".
const std::pair<const char*, const char*> kLayerNames[] = {
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.o_proj.bias", "attn_output.bias"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    {"mlp.gate_proj.bias", "ffn_gate.bias"},
    {"mlp.up_proj.bias", "ffn_up.bias"},
    {"mlp.down_proj.bias", "ffn_down.bias"},
    {"input_layernorm.weight", "attn_norm.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    // Mixture of experts (qwen2moe, qwen3moe): the router and qwen2moe's shared expert; the
    // experts themselves are stacked per layer (gguf_experts_name).
    {"mlp.gate.weight", "ffn_gate_inp.weight"},
    {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight"},
    {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight"},
    {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight"},
    {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight"},
};
// An expert projection's HF name <-> its stacked GGUF tensor's.
const std::pair<const char*, const char*> kExpertNames[] = {
    {"gate_proj", "ffn_gate_exps.weight"}, {"up_proj", "ffn_up_exps.weight"}, {"down_proj", "ffn_down_exps.weight"}};
const std::pair<const char*, const char*> kGlobalNames[] = {
    {"model.embed_tokens.weight", "token_embd.weight"},
    {"model.norm.weight", "output_norm.weight"},
    {"lm_head.weight", "output.weight"},
};

// Splits "<prefix><N>.<rest>" into N and rest; false when name does not have that form.
bool split_layer(const std::string& name, const std::string& prefix, std::string* n,
                 std::string* rest) {
  if (name.rfind(prefix, 0) != 0) return false;
  const size_t dot = name.find('.', prefix.size());
  if (dot == std::string::npos || dot == prefix.size()) return false;
  *n = name.substr(prefix.size(), dot - prefix.size());
  for (char c : *n)
    if (c < '0' || c > '9') return false;
  *rest = name.substr(dot + 1);
  return true;
}

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

// llama.cpp keeps the routers in f32 whatever the file type (its converter's and quantiser's
// rule): they decide which experts run.
bool is_router(const std::string& gguf_name) {
  return gguf_name.find(".ffn_gate_inp.") != std::string::npos ||
         gguf_name.find(".ffn_gate_inp_shexp.") != std::string::npos;
}

bool is_qk(const std::string& gguf_name) {
  return gguf_name.find(".attn_q.") != std::string::npos ||
         gguf_name.find(".attn_k.") != std::string::npos;
}

}  // namespace

std::string gguf_arch_for_model_type(const std::string& model_type) {
  if (model_type == "llama" || model_type == "mistral") return "llama";
  if (model_type == "qwen2" || model_type == "qwen3") return model_type;
  if (model_type == "qwen2_moe") return "qwen2moe";
  if (model_type == "qwen3_moe") return "qwen3moe";
  UNILLM_THROW(ConfigError, "[gguf] model_type '", model_type,
               "' has no GGUF export (supported: llama, mistral, qwen2, qwen3, qwen2_moe, qwen3_moe)");
}

bool split_expert_name(const std::string& hf_name, int64_t* layer, int64_t* expert, std::string* proj) {
  std::string n, rest;
  if (!split_layer(hf_name, "model.layers.", &n, &rest) || rest.rfind("mlp.experts.", 0) != 0) return false;
  const std::string tail = rest.substr(12);  // "<E>.<proj>.weight"
  const size_t dot = tail.find('.');
  if (dot == std::string::npos || !all_digits(tail.substr(0, dot))) return false;
  const std::string p = tail.substr(dot + 1);
  for (const auto& [hf, gg] : kExpertNames)
    if (p == std::string(hf) + ".weight") {
      *layer = std::stoll(n);
      *expert = std::stoll(tail.substr(0, dot));
      *proj = hf;
      return true;
    }
  return false;
}

std::string gguf_experts_name(int64_t layer, const std::string& proj) {
  for (const auto& [hf, gg] : kExpertNames)
    if (proj == hf) return "blk." + std::to_string(layer) + "." + gg;
  UNILLM_THROW(ConfigError, "[gguf] '", proj, "' is not an expert projection");
}

bool split_gguf_experts_name(const std::string& gguf_name, int64_t* layer, std::string* proj) {
  std::string n, rest;
  if (!split_layer(gguf_name, "blk.", &n, &rest)) return false;
  for (const auto& [hf, gg] : kExpertNames)
    if (rest == gg) {
      *layer = std::stoll(n);
      *proj = hf;
      return true;
    }
  return false;
}

bool gguf_arch_permutes_qk(const std::string& arch) { return arch == "llama"; }

std::string gguf_tensor_name(const std::string& hf_name) {
  for (const auto& [hf, gg] : kGlobalNames)
    if (hf_name == hf) return gg;
  std::string n, rest;
  if (!split_layer(hf_name, "model.layers.", &n, &rest)) return "";
  for (const auto& [hf, gg] : kLayerNames)
    if (rest == hf) return "blk." + n + "." + gg;
  return "";
}

std::string hf_tensor_name(const std::string& gguf_name) {
  for (const auto& [hf, gg] : kGlobalNames)
    if (gguf_name == gg) return hf;
  std::string n, rest;
  if (!split_layer(gguf_name, "blk.", &n, &rest)) return "";
  for (const auto& [hf, gg] : kLayerNames)
    if (rest == gg) return "model.layers." + n + "." + hf;
  return "";
}

std::string permute_rope_rows(const uint8_t* data, int64_t rows, size_t row_bytes, int64_t n_heads,
                              bool to_gguf) {
  if (n_heads <= 0 || rows % n_heads != 0 || (rows / n_heads) % 2 != 0)
    UNILLM_THROW(ConfigError, "[gguf] ", rows, " q/k rows do not split into ", n_heads,
                 " heads of even size");
  const int64_t D = rows / n_heads, half = D / 2;
  std::string out(static_cast<size_t>(rows) * row_bytes, '\0');
  for (int64_t h = 0; h < n_heads; ++h)
    for (int64_t i = 0; i < half; ++i)
      for (int64_t c = 0; c < 2; ++c) {
        const int64_t hf_row = h * D + c * half + i, gguf_row = h * D + 2 * i + c;
        const int64_t dst = to_gguf ? gguf_row : hf_row, src = to_gguf ? hf_row : gguf_row;
        std::memcpy(out.data() + dst * row_bytes, data + src * row_bytes, row_bytes);
      }
  return out;
}

void add_gguf_model_params(const GgufModelParams& p, GgufMetadata& md) {
  const std::string a = p.arch + ".";
  auto u32 = [&](const std::string& k, int64_t v) {
    md.emplace_back(a + k, GgufValue::u32(static_cast<uint32_t>(v)));
  };
  auto f32 = [&](const std::string& k, double v) {
    md.emplace_back(a + k, GgufValue::f32(static_cast<float>(v)));
  };
  md.emplace_back("general.architecture", GgufValue::string(p.arch));
  md.emplace_back("general.name", GgufValue::string(p.name));
  u32("vocab_size", p.vocab_size);
  u32("context_length", p.context_length);
  u32("embedding_length", p.embedding_length);
  u32("block_count", p.block_count);
  u32("feed_forward_length", p.feed_forward_length);
  u32("attention.head_count", p.head_count);
  u32("attention.head_count_kv", p.head_count_kv);
  f32("attention.layer_norm_rms_epsilon", p.rms_eps);
  f32("rope.freq_base", p.rope_theta);
  u32("rope.dimension_count", p.rope_dim);
  if (p.head_dim * p.head_count != p.embedding_length) {
    u32("attention.key_length", p.head_dim);
    u32("attention.value_length", p.head_dim);
  }
  if (p.rope_scaling == "linear" || p.rope_scaling == "yarn") {
    md.emplace_back(a + "rope.scaling.type", GgufValue::string(p.rope_scaling));
    f32("rope.scaling.factor", p.rope_factor);
  }
  if (p.rope_scaling == "yarn") {
    u32("rope.scaling.original_context_length", p.rope_original_context);
    if (p.rope_attn_factor != 1.0) f32("rope.scaling.attn_factor", p.rope_attn_factor);
  }
  if (p.expert_count > 0) {
    u32("expert_count", p.expert_count);
    u32("expert_used_count", p.expert_used_count);
    u32("expert_feed_forward_length", p.expert_feed_forward_length);
    if (p.expert_shared_feed_forward_length > 0)
      u32("expert_shared_feed_forward_length", p.expert_shared_feed_forward_length);
  }
}

std::vector<float> llama3_rope_factors(double theta, int64_t rot_dim, double factor,
                                       double low_freq_factor, double high_freq_factor,
                                       int64_t original_max_position) {
  const double low_wavelen = static_cast<double>(original_max_position) / low_freq_factor;
  const double high_wavelen = static_cast<double>(original_max_position) / high_freq_factor;
  std::vector<float> out;
  for (int64_t i = 0; i < rot_dim; i += 2) {
    const double freq =
        1.0 / std::pow(theta, static_cast<double>(i) / static_cast<double>(rot_dim));
    const double wavelen = 2.0 * kPi / freq;
    double f = 1.0;
    if (wavelen > low_wavelen) {
      f = factor;
    } else if (wavelen >= high_wavelen) {
      const double smooth =
          (static_cast<double>(original_max_position) / wavelen - low_freq_factor) /
          (high_freq_factor - low_freq_factor);
      f = 1.0 / ((1.0 - smooth) / factor + smooth);
    }
    out.push_back(static_cast<float>(f));
  }
  return out;
}

GgufTensorOut gguf_tensor_from_hf(const std::string& hf_name, const Tensor& t,
                                  const GgufTensorPlan& plan, std::string* note) {
  GgufTensorOut out;
  out.name = gguf_tensor_name(hf_name);
  if (out.name.empty())
    UNILLM_THROW(ConfigError, "[gguf] tensor '", hf_name,
                 "' has no llama.cpp name; cannot export it");
  out.shape = t.shape();
  out.type = t.ndim() == 1 || is_router(out.name) ? GgmlType::kF32 : plan.type;
  const bool blocks = out.type == GgmlType::kQ8_0 || out.type == GgmlType::kQ4_0;
  if (blocks && t.size(-1) % 32 != 0) {
    out.type = GgmlType::kF16;
    if (note)
      *note =
          UNILLM_MSG(out.name, ": rows of ", t.size(-1), " are not whole 32-blocks; written F16");
  }
  int64_t heads = 0;
  if (gguf_arch_permutes_qk(plan.arch) && is_qk(out.name))
    heads = out.name.find(".attn_q.") != std::string::npos ? plan.head_count : plan.head_count_kv;
  const GgmlType type = out.type;
  const Tensor src = t;
  out.bytes = [src, type, heads]() {
    const std::vector<float> x = src.to_float_vector();
    const int64_t row = src.ndim() == 1 ? 1 : src.size(-1);
    const int64_t rows = static_cast<int64_t>(x.size()) / row;
    // A 1-D tensor (a bias) is encoded as one row but permuted element by element.
    const int64_t enc_row = src.ndim() == 1 ? static_cast<int64_t>(x.size()) : row;
    const size_t row_bytes = ggml_row_bytes(type, enc_row);
    std::string bytes(row_bytes * static_cast<size_t>(static_cast<int64_t>(x.size()) / enc_row),
                      '\0');
    auto* dst = reinterpret_cast<uint8_t*>(bytes.data());
    for (int64_t r = 0; r < static_cast<int64_t>(x.size()) / enc_row; ++r)
      quantize_row(type, x.data() + r * enc_row, dst + r * row_bytes, enc_row);
    if (heads == 0) return bytes;
    return permute_rope_rows(dst, rows, bytes.size() / static_cast<size_t>(rows), heads, true);
  };
  return out;
}

GgufTensorOut gguf_experts_from_hf(const std::string& gguf_name, const std::vector<Tensor>& experts,
                                   const GgufTensorPlan& plan, std::string* note) {
  if (experts.empty()) UNILLM_THROW(ConfigError, "[gguf] ", gguf_name, ": no experts");
  for (const Tensor& e : experts)
    if (e.ndim() != 2 || e.shape() != experts.front().shape())
      UNILLM_THROW(ConfigError, "[gguf] ", gguf_name, ": the experts' matrices differ in shape (",
                   shape_str(e.shape()), " vs ", shape_str(experts.front().shape()), ")");
  GgufTensorOut out;
  out.name = gguf_name;
  const int64_t rows = experts.front().size(0), cols = experts.front().size(1);
  out.shape = {static_cast<int64_t>(experts.size()), rows, cols};
  out.type = plan.type;
  if ((out.type == GgmlType::kQ8_0 || out.type == GgmlType::kQ4_0) && cols % 32 != 0) {
    out.type = GgmlType::kF16;
    if (note) *note = UNILLM_MSG(out.name, ": rows of ", cols, " are not whole 32-blocks; written F16");
  }
  const GgmlType type = out.type;
  out.bytes = [experts, type, rows, cols]() {
    const size_t row_bytes = ggml_row_bytes(type, cols);
    std::string bytes(row_bytes * static_cast<size_t>(rows) * experts.size(), '\0');
    auto* dst = reinterpret_cast<uint8_t*>(bytes.data());
    for (const Tensor& e : experts) {  // expert e's rows at index e, as torch.stack(dim=0)
      const std::vector<float> x = e.to_float_vector();
      for (int64_t r = 0; r < rows; ++r, dst += row_bytes) quantize_row(type, x.data() + r * cols, dst, cols);
    }
    return bytes;
  };
  return out;
}

}  // namespace unillm::io
