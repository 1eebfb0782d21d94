// config.json parsing for the Llama family: llama (Llama 2/3), mistral, qwen2, qwen3.
#include "models/model_config.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace unillm::models {

using nlohmann::json;

const std::vector<std::string>& supported_model_types() {
  static const std::vector<std::string> types{"llama", "mistral", "qwen2", "qwen3"};
  return types;
}

namespace {

// Reads an optional key of type T; a present key of the wrong type is an error naming it.
template <typename T>
T get_or(const json& j, const std::string& path, const char* key, T fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    UNILLM_THROW(ConfigError, "[config] ", path, ": key '", key, "' has the wrong type (", it->type_name(), ")");
  }
}

int64_t require_positive(const json& j, const std::string& path, const char* key) {
  if (!j.contains(key) || j[key].is_null()) UNILLM_THROW(ConfigError, "[config] ", path, ": key '", key, "' missing");
  int64_t v = get_or<int64_t>(j, path, key, 0);
  if (v <= 0) UNILLM_THROW(ConfigError, "[config] ", path, ": key '", key, "' must be > 0, got ", v);
  return v;
}

std::string resolve_model_type(const json& j, const std::string& path) {
  std::string type = get_or<std::string>(j, path, "model_type", "");
  std::string arch;
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty())
    arch = j["architectures"][0].is_string() ? j["architectures"][0].get<std::string>() : "";
  if (type.empty()) {  // fall back to the architecture name
    static const std::pair<const char*, const char*> by_arch[] = {
        {"LlamaForCausalLM", "llama"}, {"MistralForCausalLM", "mistral"},
        {"Qwen2ForCausalLM", "qwen2"}, {"Qwen3ForCausalLM", "qwen3"}};
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
  c.rope.theta = get_or<double>(j, path, "rope_theta", 10000.0);
  double partial = get_or<double>(j, path, "partial_rotary_factor", 1.0);
  c.rope.rot_dim = static_cast<int64_t>(static_cast<double>(c.head_dim) * partial);
  auto it = j.find("rope_scaling");
  if (it == j.end() || it->is_null()) return;
  if (!it->is_object()) UNILLM_THROW(ConfigError, "[config] ", path, ": 'rope_scaling' must be an object");
  const json& s = *it;
  std::string type = get_or<std::string>(s, path, "rope_type", get_or<std::string>(s, path, "type", ""));
  if (type == "default") return;
  if (type != "linear" && type != "llama3")
    UNILLM_THROW(NotImplemented, "[config] ", path, ": rope_scaling type '", type, "' is not implemented (linear, llama3 are)");
  c.rope.scaling_type = type;
  c.rope.factor = get_or<double>(s, path, "factor", 1.0);
  if (c.rope.factor <= 0) UNILLM_THROW(ConfigError, "[config] ", path, ": rope_scaling.factor must be > 0");
  if (type == "llama3") {
    c.rope.low_freq_factor = get_or<double>(s, path, "low_freq_factor", 1.0);
    c.rope.high_freq_factor = get_or<double>(s, path, "high_freq_factor", 4.0);
    c.rope.original_max_position = get_or<int64_t>(s, path, "original_max_position_embeddings", 8192);
  }
}

std::vector<int32_t> parse_eos(const json& j, const std::string& path) {
  auto it = j.find("eos_token_id");
  if (it == j.end() || it->is_null()) return {};
  if (it->is_number_integer()) return {it->get<int32_t>()};
  if (it->is_array()) {
    std::vector<int32_t> out;
    for (auto& v : *it) {
      if (!v.is_number_integer()) UNILLM_THROW(ConfigError, "[config] ", path, ": 'eos_token_id' must hold integers");
      out.push_back(v.get<int32_t>());
    }
    return out;
  }
  UNILLM_THROW(ConfigError, "[config] ", path, ": 'eos_token_id' must be an integer or a list");
}

}  // namespace

ModelConfig load_model_config(const std::string& path) {
  std::ifstream f(path);
  if (!f) UNILLM_THROW(IoError, "[config] cannot open ", path);
  json j;
  try {
    j = json::parse(f);
  } catch (const json::parse_error& e) {
    UNILLM_THROW(ConfigError, "[config] ", path, ": invalid JSON at byte ", e.byte);
  }
  if (!j.is_object()) UNILLM_THROW(ConfigError, "[config] ", path, ": expected a JSON object");
  ModelConfig c;
  c.model_type = resolve_model_type(j, path);
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() && j["architectures"][0].is_string())
    c.architecture = j["architectures"][0].get<std::string>();
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
  c.rms_norm_eps = get_or<double>(j, path, "rms_norm_eps", 1e-6);
  c.tie_word_embeddings = get_or<bool>(j, path, "tie_word_embeddings", false);
  bool attention_bias = get_or<bool>(j, path, "attention_bias", false);
  c.attention_bias = c.model_type == "qwen2" ? true : attention_bias;
  c.o_bias = c.model_type == "qwen2" ? false : attention_bias;
  c.mlp_bias = get_or<bool>(j, path, "mlp_bias", false);
  c.qk_norm = c.model_type == "qwen3";
  std::string act = get_or<std::string>(j, path, "hidden_act", "silu");
  if (act != "silu" && act != "swish")
    UNILLM_THROW(NotImplemented, "[config] ", path, ": hidden_act '", act, "' is not implemented (silu is)");
  parse_rope(j, path, c);
  if (c.rope.rot_dim <= 0 || c.rope.rot_dim % 2 != 0 || c.rope.rot_dim > c.head_dim)
    UNILLM_THROW(ConfigError, "[config] ", path, ": rotary dim ", c.rope.rot_dim, " invalid for head_dim ", c.head_dim);
  bool use_sw = get_or<bool>(j, path, "use_sliding_window", c.model_type == "mistral");
  c.sliding_window = use_sw ? get_or<int64_t>(j, path, "sliding_window", 0) : 0;
  c.bos_token_id = get_or<int32_t>(j, path, "bos_token_id", -1);
  c.eos_token_ids = parse_eos(j, path);
  c.torch_dtype = get_or<std::string>(j, path, "torch_dtype", "");
  c.initializer_range = get_or<double>(j, path, "initializer_range", 0.02);
  c.pad_token_id = get_or<int32_t>(j, path, "pad_token_id", -1);
  c.raw_json = j.dump();
  return c;
}

}  // namespace unillm::models
