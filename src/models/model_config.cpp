// config.json parsing for the Llama family: llama (Llama 2/3), mistral, qwen2, qwen3, and the
// mixture-of-experts qwen2_moe and qwen3_moe.
#include "models/model_config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <type_traits>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace unillm::models {

using nlohmann::json;

const std::vector<std::string>& supported_model_types() {
  static const std::vector<std::string> types{"llama", "mistral", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe"};
  return types;
}

namespace {

[[noreturn]] void bad_key(const std::string& path, const std::string& key, const std::string& what) {
  UNILLM_THROW(ConfigError, "[config] ", path, ": key '", key, "' ", what);
}

// Reads an optional key of type T; a present key of the wrong type is an error naming it. An
// integer key must hold a JSON integer that fits T (5.5 or 1e40 is refused, never truncated); a
// floating-point key must hold a number (JSON has no NaN; an overflowing 1e999 reads as inf and
// is refused).
template <typename T>
T get_or(const json& j, const std::string& path, const char* key, T fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if constexpr (std::is_same_v<T, bool>) {
    if (!it->is_boolean()) bad_key(path, key, UNILLM_MSG("must be true or false, got ", it->dump()));
    return it->get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    if (!it->is_number_integer()) bad_key(path, key, UNILLM_MSG("must be an integer, got ", it->dump()));
    const bool fits = it->is_number_unsigned()
                          ? it->get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max())
                          : it->get<int64_t>() >= std::numeric_limits<T>::min() &&
                                it->get<int64_t>() <= std::numeric_limits<T>::max();
    if (!fits) bad_key(path, key, UNILLM_MSG("is out of range, got ", it->dump()));
    return static_cast<T>(it->get<int64_t>());
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!it->is_number() || !std::isfinite(it->get<double>()))
      bad_key(path, key, UNILLM_MSG("must be a finite number, got ", it->dump()));
    return it->get<T>();
  } else {
    if (!it->is_string()) bad_key(path, key, UNILLM_MSG("must be a string, got ", it->dump()));
    return it->get<T>();
  }
}

int64_t require_positive(const json& j, const std::string& path, const char* key) {
  if (!j.contains(key) || j[key].is_null()) UNILLM_THROW(ConfigError, "[config] ", path, ": key '", key, "' missing");
  int64_t v = get_or<int64_t>(j, path, key, 0);
  if (v <= 0) UNILLM_THROW(ConfigError, "[config] ", path, ": key '", key, "' must be > 0, got ", v);
  return v;
}

// A floating-point key that must be > 0 (rms_norm_eps: a non-positive eps makes RMSNorm divide
// by zero or take the root of a negative number; rope_theta: no frequencies).
double positive_number(const json& j, const std::string& path, const char* key, double fallback) {
  double v = get_or<double>(j, path, key, fallback);
  if (!(v > 0)) bad_key(path, key, UNILLM_MSG("must be > 0, got ", v));
  return v;
}

// A token id key (-1 = unset) must name a row of the embedding.
void check_token_id(const std::string& path, const char* key, int64_t id, int64_t vocab) {
  if (id < -1 || id >= vocab)
    bad_key(path, key, UNILLM_MSG("= ", id, " is outside the vocabulary (vocab_size ", vocab, ")"));
}

std::string resolve_model_type(const json& j, const std::string& path) {
  std::string type = get_or<std::string>(j, path, "model_type", "");
  std::string arch;
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty())
    arch = j["architectures"][0].is_string() ? j["architectures"][0].get<std::string>() : "";
  if (type.empty()) {  // fall back to the architecture name
    static const std::pair<const char*, const char*> by_arch[] = {
        {"LlamaForCausalLM", "llama"}, {"MistralForCausalLM", "mistral"},
        {"Qwen2ForCausalLM", "qwen2"}, {"Qwen3ForCausalLM", "qwen3"},
        {"Qwen2MoeForCausalLM", "qwen2_moe"}, {"Qwen3MoeForCausalLM", "qwen3_moe"},
        {"LlamaMoDForCausalLM", "llama"}, {"MistralMoDForCausalLM", "mistral"}};
    for (auto& [a, t] : by_arch)
      if (arch == a) type = t;
  }
  for (auto& t : supported_model_types())
    if (t == type) return type;
  std::string list;
  for (auto& t : supported_model_types()) list += (list.empty() ? "" : ", ") + t;
  UNILLM_THROW(ConfigError, "[config] ", path, ": unsupported model_type '", type, "'",
               arch.empty() ? "" : " (architectures: " + arch + ")", "; supported: ", list);
}

void parse_rope(const json& j, const std::string& path, ModelConfig& c) {
  c.rope.theta = positive_number(j, path, "rope_theta", 10000.0);
  double partial = get_or<double>(j, path, "partial_rotary_factor", 1.0);
  if (!(partial > 0 && partial <= 1))
    bad_key(path, "partial_rotary_factor", UNILLM_MSG("must be in (0, 1], got ", partial));
  c.rope.rot_dim = static_cast<int64_t>(static_cast<double>(c.head_dim) * partial);
  auto it = j.find("rope_scaling");
  if (it == j.end() || it->is_null()) return;
  if (!it->is_object()) UNILLM_THROW(ConfigError, "[config] ", path, ": 'rope_scaling' must be an object");
  const json& s = *it;
  std::string type = get_or<std::string>(s, path, "rope_type", get_or<std::string>(s, path, "type", ""));
  if (type == "default") return;
  if (type != "linear" && type != "llama3" && type != "yarn" && type != "dynamic")
    UNILLM_THROW(NotImplemented, "[config] ", path, ": rope_scaling type '", type,
                 "' is not implemented (linear, llama3, yarn, dynamic are)");
  c.rope.scaling_type = type;
  const std::string in = path + " rope_scaling";
  c.rope.factor = positive_number(s, in, "factor", 1.0);
  if (type == "dynamic") c.rope.max_position = c.max_position_embeddings;
  if (type == "yarn") {
    // The correction range sits at the pretraining length (YaRN, vLLM, llama.cpp); factor is
    // taken as written (docs/ARCHITECTURE.md, "YaRN and dynamic NTK RoPE").
    c.rope.original_max_position = get_or<int64_t>(s, in, "original_max_position_embeddings", c.max_position_embeddings);
    if (c.rope.original_max_position <= 0) bad_key(in, "original_max_position_embeddings", "must be > 0");
    c.rope.beta_fast = positive_number(s, in, "beta_fast", 32.0);
    c.rope.beta_slow = positive_number(s, in, "beta_slow", 1.0);
    for (auto [key, field] : {std::pair{"attention_factor", &c.rope.attention_factor},
                              std::pair{"mscale", &c.rope.mscale}, std::pair{"mscale_all_dim", &c.rope.mscale_all_dim}})
      if (s.contains(key) && !s[key].is_null()) *field = positive_number(s, in, key, 1.0);
    c.rope.truncate = get_or<bool>(s, in, "truncate", true);
    if (c.rope.rot_dim != c.head_dim && ops::rope_attention_factor(c.rope) != 1.0)
      bad_key(in, "rope_type", "yarn's attention factor with partial_rotary_factor < 1 is not supported "
                               "(it scales only the rotated part of q and k)");
  }
  if (type == "llama3") {
    c.rope.low_freq_factor = positive_number(s, in, "low_freq_factor", 1.0);
    c.rope.high_freq_factor = positive_number(s, in, "high_freq_factor", 4.0);
    // HF divides by (high - low) when smoothing between the two wavelengths.
    if (!(c.rope.high_freq_factor > c.rope.low_freq_factor))
      bad_key(in, "high_freq_factor", UNILLM_MSG("must be > low_freq_factor (", c.rope.low_freq_factor,
                                                 "), got ", c.rope.high_freq_factor));
    c.rope.original_max_position = get_or<int64_t>(s, in, "original_max_position_embeddings", 8192);
    if (c.rope.original_max_position <= 0)
      bad_key(in, "original_max_position_embeddings", "must be > 0");
  }
}

// The sparse layers' keys (HF's Qwen2MoeConfig / Qwen3MoeConfig and their defaults).
void parse_moe(const json& j, const std::string& path, ModelConfig& c) {
  c.num_experts = get_or<int64_t>(j, path, "num_experts", 60);
  if (c.num_experts < 0) bad_key(path, "num_experts", UNILLM_MSG("must be >= 0, got ", c.num_experts));
  if (c.num_experts == 0) return;
  c.num_experts_per_tok = get_or<int64_t>(j, path, "num_experts_per_tok", 4);
  if (c.num_experts_per_tok < 1 || c.num_experts_per_tok > c.num_experts)
    bad_key(path, "num_experts_per_tok",
            UNILLM_MSG("must be in [1, num_experts = ", c.num_experts, "], got ", c.num_experts_per_tok));
  c.moe_intermediate_size = require_positive(j, path, "moe_intermediate_size");
  c.norm_topk_prob = get_or<bool>(j, path, "norm_topk_prob", false);
  c.decoder_sparse_step = get_or<int64_t>(j, path, "decoder_sparse_step", 1);
  if (c.decoder_sparse_step < 1)
    bad_key(path, "decoder_sparse_step", UNILLM_MSG("must be >= 1, got ", c.decoder_sparse_step));
  if (c.model_type == "qwen2_moe") {
    c.shared_expert_intermediate_size = get_or<int64_t>(j, path, "shared_expert_intermediate_size", 0);
    if (c.shared_expert_intermediate_size < 0)
      bad_key(path, "shared_expert_intermediate_size", "must be >= 0");
  }
  if (auto it = j.find("mlp_only_layers"); it != j.end() && !it->is_null()) {
    if (!it->is_array()) bad_key(path, "mlp_only_layers", "must be a list of layer indices");
    for (const auto& v : *it) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0)
        bad_key(path, "mlp_only_layers", UNILLM_MSG("must hold layer indices, got ", v.dump()));
      c.mlp_only_layers.push_back(v.get<int64_t>());
    }
  }
  c.output_router_logits = get_or<bool>(j, path, "output_router_logits", false);
  c.router_aux_loss_coef = get_or<double>(j, path, "router_aux_loss_coef", 0.001);
  if (!std::isfinite(c.router_aux_loss_coef) || c.router_aux_loss_coef < 0)
    bad_key(path, "router_aux_loss_coef", UNILLM_MSG("must be a finite number >= 0, got ", c.router_aux_loss_coef));
}

std::vector<int32_t> parse_eos(const json& j, const std::string& path) {
  auto it = j.find("eos_token_id");
  if (it == j.end() || it->is_null()) return {};
  if (it->is_number_integer()) return {get_or<int32_t>(j, path, "eos_token_id", -1)};
  if (it->is_array()) {
    std::vector<int32_t> out;
    for (auto& v : *it) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
        UNILLM_THROW(ConfigError, "[config] ", path, ": 'eos_token_id' must hold token ids, got ", v.dump());
      out.push_back(v.get<int32_t>());
    }
    return out;
  }
  UNILLM_THROW(ConfigError, "[config] ", path, ": 'eos_token_id' must be an integer or a list");
}

}  // namespace

ModelConfig load_model_config(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) UNILLM_THROW(IoError, "[config] cannot open ", path);
  std::ostringstream text;
  text << f.rdbuf();
  return parse_model_config(text.str(), path);
}

ModelConfig parse_model_config(const std::string& text, const std::string& path) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    UNILLM_THROW(ConfigError, "[config] ", path, ": invalid JSON at byte ", e.byte);
  } catch (const json::exception& e) {  // out_of_range: a number overflowing a double (1e400)
    UNILLM_THROW(ConfigError, "[config] ", path, ": invalid JSON (", e.what(), ")");
  }
  if (!j.is_object()) UNILLM_THROW(ConfigError, "[config] ", path, ": expected a JSON object");
  ModelConfig c;
  c.model_type = resolve_model_type(j, path);
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() && j["architectures"][0].is_string())
    c.architecture = j["architectures"][0].get<std::string>();
  // The mixture-of-depth package's save_pretrained names its class LlamaMoDForCausalLM (model_type
  // stays llama); its checkpoints have routers and "block." layers (models/mixture_of_depths.h).
  c.mixture_of_depths = c.architecture.ends_with("MoDForCausalLM");
  if (c.architecture.ends_with("ForTokenClassification")) {
    // HF's num_labels is the length of id2label (2 when the file says none).
    const size_t labels = j.contains("id2label") && j["id2label"].is_object() ? j["id2label"].size() : 2;
    if (labels != 1)
      UNILLM_THROW(NotImplemented, "[config] ", path, ": ", c.architecture, " with ", labels,
                   " labels (id2label); unillm reads a token classifier with one label, a reward model");
    c.token_classification = true;
  }
  c.vocab_size = require_positive(j, path, "vocab_size");
  c.hidden_size = require_positive(j, path, "hidden_size");
  c.intermediate_size = require_positive(j, path, "intermediate_size");
  c.num_layers = require_positive(j, path, "num_hidden_layers");
  c.num_heads = require_positive(j, path, "num_attention_heads");
  c.num_kv_heads = get_or<int64_t>(j, path, "num_key_value_heads", c.num_heads);
  if (c.num_kv_heads <= 0 || c.num_heads % c.num_kv_heads != 0)
    UNILLM_THROW(ConfigError, "[config] ", path, ": num_attention_heads (", c.num_heads,
                 ") must be a multiple of num_key_value_heads (", c.num_kv_heads, ")");
  c.head_dim = get_or<int64_t>(j, path, "head_dim", 0);
  if (c.head_dim <= 0) {
    if (c.hidden_size % c.num_heads != 0)
      UNILLM_THROW(ConfigError, "[config] ", path, ": hidden_size not divisible by num_attention_heads and no head_dim");
    c.head_dim = c.hidden_size / c.num_heads;
  }
  c.max_position_embeddings = get_or<int64_t>(j, path, "max_position_embeddings", 2048);
  if (c.max_position_embeddings <= 0)
    bad_key(path, "max_position_embeddings", UNILLM_MSG("must be > 0, got ", c.max_position_embeddings));
  c.rms_norm_eps = positive_number(j, path, "rms_norm_eps", 1e-6);
  c.tie_word_embeddings = get_or<bool>(j, path, "tie_word_embeddings", false);
  bool attention_bias = get_or<bool>(j, path, "attention_bias", false);
  const bool qwen2_like = c.model_type == "qwen2" || c.model_type == "qwen2_moe";
  c.attention_bias = qwen2_like ? true : attention_bias;
  c.o_bias = qwen2_like ? false : attention_bias;
  c.mlp_bias = get_or<bool>(j, path, "mlp_bias", false);
  c.qk_norm = c.model_type == "qwen3" || c.model_type == "qwen3_moe";
  if (c.model_type == "qwen2_moe" || c.model_type == "qwen3_moe") parse_moe(j, path, c);
  std::string act = get_or<std::string>(j, path, "hidden_act", "silu");
  if (act != "silu" && act != "swish")
    UNILLM_THROW(NotImplemented, "[config] ", path, ": hidden_act '", act, "' is not implemented (silu is)");
  parse_rope(j, path, c);
  if (c.rope.rot_dim <= 0 || c.rope.rot_dim % 2 != 0 || c.rope.rot_dim > c.head_dim)
    UNILLM_THROW(ConfigError, "[config] ", path, ": rotary dim ", c.rope.rot_dim, " invalid for head_dim ", c.head_dim);
  bool use_sw = get_or<bool>(j, path, "use_sliding_window", c.model_type == "mistral");
  c.sliding_window = use_sw ? get_or<int64_t>(j, path, "sliding_window", 0) : 0;
  if (c.sliding_window < 0) bad_key(path, "sliding_window", UNILLM_MSG("must be >= 0, got ", c.sliding_window));
  c.bos_token_id = get_or<int32_t>(j, path, "bos_token_id", -1);
  check_token_id(path, "bos_token_id", c.bos_token_id, c.vocab_size);
  c.eos_token_ids = parse_eos(j, path);
  for (int32_t id : c.eos_token_ids) check_token_id(path, "eos_token_id", id, c.vocab_size);
  c.torch_dtype = get_or<std::string>(j, path, "torch_dtype", "");
  c.initializer_range = get_or<double>(j, path, "initializer_range", 0.02);
  if (c.initializer_range < 0)
    bad_key(path, "initializer_range", UNILLM_MSG("must be >= 0, got ", c.initializer_range));
  c.pad_token_id = get_or<int32_t>(j, path, "pad_token_id", -1);
  check_token_id(path, "pad_token_id", c.pad_token_id, c.vocab_size);
  c.raw_json = j.dump();
  return c;
}

void set_router_aux_loss(ModelConfig& config, double coef) {
  if (config.num_experts == 0) return;
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(config.raw_json);
  j["output_router_logits"] = true;
  j["router_aux_loss_coef"] = coef;
  config.raw_json = j.dump(2);
  config.output_router_logits = true;
  config.router_aux_loss_coef = coef;
}

bool ModelConfig::sparse_layer(int64_t l) const {
  return num_experts > 0 && (l + 1) % decoder_sparse_step == 0 &&
         std::find(mlp_only_layers.begin(), mlp_only_layers.end(), l) == mlp_only_layers.end();
}

void check_tokenizer_fits(const io::Tokenizer& tokenizer, const ModelConfig& config,
                          const std::string& config_path) {
  if (tokenizer.vocab_size() <= config.vocab_size) return;
  UNILLM_THROW(ConfigError, "[config] ", tokenizer.source(), " has token ids up to ",
               tokenizer.vocab_size() - 1, " (", tokenizer.vocab_size(),
               " tokens with its added tokens), but ", config_path, " key 'vocab_size' is ",
               config.vocab_size, ": the model has no embedding row for ids >= ", config.vocab_size,
               " (a tokenizer of another model?)");
}

}  // namespace unillm::models
