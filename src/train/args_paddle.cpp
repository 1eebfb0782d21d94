// The PaddleNLP dialect: a JSON argument file of llm/run_finetune.py (ModelArgument,
// DataArgument and PaddleNLP's TrainingArguments) mapped onto unillm's keys. The map is
// docs/paddlenlp.md; keys shared with HF TrainingArguments pass through unchanged.
#include <yaml-cpp/yaml.h>

#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "train/args_internal.h"
#include "train/key_table.h"

namespace unillm::train {

using detail::Field;

namespace {

enum class Map {
  kSame,             // the same key in unillm's table
  kLora,             // lora: true → finetuning_type lora (else full)
  kRecompute,        // recompute → disable_gradient_checkpointing = !recompute
  kRslora,           // rslora → use_rslora
  kPositiveOrUnset,  // lora_alpha: PaddleNLP's -1 means "unset"
  kIgnored,          // Paddle-only performance or checkpoint-format switch: warn when on
  kDegree,           // a parallel degree: 1 (or -1) is fine, more is not implemented yet
  kNotImplemented,   // a method unillm does not have: refused when on
  kInputDir,         // input_dir: run_pretrain.py's corpus → stage pt from that corpus
  kMaxSeqLength,     // run_pretrain.py's max_seq_length → cutoff_len (the block length)
};

// PaddleNLP-only keys (names as in llm/run_finetune.py's argument classes).
const std::map<std::string, Map>& paddle_keys() {
  static const std::map<std::string, Map> m = {
      {"dataset_name_or_path", Map::kSame}, {"src_length", Map::kSame},
      {"max_length", Map::kSame}, {"zero_padding", Map::kSame}, {"lora_rank", Map::kSame},
      {"lora", Map::kLora}, {"recompute", Map::kRecompute}, {"rslora", Map::kRslora},
      {"lora_alpha", Map::kPositiveOrUnset},
      {"use_flash_attention", Map::kIgnored}, {"use_fused_rms_norm", Map::kIgnored},
      {"use_fused_rope", Map::kIgnored}, {"use_fused_linear", Map::kIgnored},
      {"unified_checkpoint", Map::kIgnored}, {"unified_checkpoint_config", Map::kIgnored},
      {"fp16_opt_level", Map::kIgnored}, {"amp_master_grad", Map::kIgnored},
      {"eval_with_do_generation", Map::kIgnored}, {"sharding", Map::kIgnored},
      {"pipeline_parallel_config", Map::kIgnored}, {"tensor_parallel_config", Map::kIgnored},
      {"sharding_parallel_config", Map::kIgnored}, {"recompute_granularity", Map::kIgnored},
      {"flash_mask", Map::kIgnored}, {"eval_accumulation_steps", Map::kIgnored},
      {"continue_training", Map::kIgnored}, {"benchmark", Map::kIgnored},
      {"device", Map::kIgnored}, {"use_quick_lora", Map::kIgnored},
      {"greedy_zero_padding", Map::kNotImplemented},
      {"tensor_parallel_degree", Map::kDegree}, {"pipeline_parallel_degree", Map::kDegree},
      {"sharding_parallel_degree", Map::kDegree}, {"sep_parallel_degree", Map::kDegree},
      {"context_parallel_degree", Map::kDegree},
      {"prefix_tuning", Map::kNotImplemented}, {"pissa", Map::kNotImplemented},
      {"dora", Map::kNotImplemented}, {"lora_plus_scale", Map::kNotImplemented},
      {"vera", Map::kNotImplemented}, {"lokr", Map::kNotImplemented},
      {"reft", Map::kNotImplemented}, {"do_ptq", Map::kNotImplemented},
      {"do_qat", Map::kNotImplemented}, {"do_gptq", Map::kNotImplemented},
      {"weight_quantize_algo", Map::kNotImplemented}, {"neftune", Map::kNotImplemented},
      // llm/run_pretrain.py (pre-tokenised corpora; docs/corpora.md)
      {"input_dir", Map::kInputDir}, {"split", Map::kSame}, {"max_seq_length", Map::kMaxSeqLength},
      {"data_impl", Map::kIgnored}, {"data_cache", Map::kIgnored}, {"skip_warmup", Map::kIgnored},
      {"share_folder", Map::kIgnored},
  };
  return m;
}

// The line of `"key":` in the JSON text, for messages (nlohmann::json keeps no positions).
std::string where_in(const std::string& text, const std::string& source, const std::string& key) {
  size_t at = text.find("\"" + key + "\"");
  if (at == std::string::npos) return source;
  return UNILLM_MSG(source, " line ", 1 + std::count(text.begin(), text.begin() + at, '\n'));
}

YAML::Node to_yaml(const nlohmann::json& v) {
  if (v.is_null()) return YAML::Node(YAML::NodeType::Null);
  if (v.is_string()) return YAML::Node(v.get<std::string>());
  if (v.is_boolean()) return YAML::Node(v.get<bool>() ? "true" : "false");
  if (v.is_array()) {
    YAML::Node n(YAML::NodeType::Sequence);
    for (const auto& e : v) n.push_back(to_yaml(e));
    return n;
  }
  if (v.is_object()) {
    YAML::Node n(YAML::NodeType::Map);
    for (auto it = v.begin(); it != v.end(); ++it) n[it.key()] = to_yaml(it.value());
    return n;
  }
  return YAML::Node(v.dump());  // numbers as their JSON text
}

[[noreturn]] void unknown_paddle_key(const std::string& key, const std::string& where) {
  std::string near = nearest_key(key);
  size_t best = std::max<size_t>(3, key.size() / 3) + 1;
  for (const auto& [k, m] : paddle_keys())
    if (size_t d = edit_distance(key, k); d < best) best = d, near = k;
  UNILLM_THROW(ConfigError, "[config] ", where, ": unknown key '", key, "'",
               near.empty() ? "" : " (did you mean '" + near + "'?)");
}

// Translates one PaddleNLP key into unillm fields (added to out).
void translate(const std::string& key, const YAML::Node& v, const std::string& where,
               std::map<std::string, Field>& out, std::vector<std::string>& warnings) {
  auto it = paddle_keys().find(key);
  if (it == paddle_keys().end()) {
    if (!find_key(key)) unknown_paddle_key(key, where);
    out[key] = Field{key, v, where};  // an HF TrainingArguments key: the same meaning
    return;
  }
  const std::string via = where + " (PaddleNLP '" + key + "')";
  auto on = [&] { return !detail::is_off(v); };
  switch (it->second) {
    case Map::kSame: out[key] = Field{key, v, where}; break;
    case Map::kLora:
      out["finetuning_type"] = Field{"finetuning_type", YAML::Node(on() ? "lora" : "full"), via};
      break;
    case Map::kRecompute:
      out["disable_gradient_checkpointing"] =
          Field{"disable_gradient_checkpointing", YAML::Node(on() ? "false" : "true"), via};
      break;
    case Map::kRslora: out["use_rslora"] = Field{"use_rslora", v, via}; break;
    case Map::kPositiveOrUnset:
      if (!(v.IsScalar() && v.Scalar().size() && v.Scalar()[0] == '-')) out[key] = Field{key, v, where};
      break;
    case Map::kIgnored:
      if (on()) warnings.push_back("[config] " + where + ": PaddleNLP key '" + key + "' is accepted and ignored by unillm");
      break;
    case Map::kDegree:
      if (v.IsScalar() && v.Scalar() != "1" && v.Scalar() != "-1" && v.Scalar() != "0")
        UNILLM_THROW(NotImplemented, "[config] ", where, ": PaddleNLP key '", key, "' = ", v.Scalar(),
                     ": parallelism is not implemented yet (1 device)");
      break;
    case Map::kInputDir:
      out[key] = Field{key, v, where};
      out["stage"] = Field{"stage", YAML::Node("pt"), via + " (run_pretrain)"};
      break;
    case Map::kMaxSeqLength: out["cutoff_len"] = Field{"cutoff_len", v, via}; break;
    case Map::kNotImplemented:
      if (on()) UNILLM_THROW(NotImplemented, "[config] ", where, ": PaddleNLP key '", key, "' is not implemented yet");
      break;
  }
}

}  // namespace

TrainArgs parse_paddle_args(const std::string& json_text, const std::string& source,
                            const std::vector<std::string>& overrides) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::parse_error& e) {
    UNILLM_THROW(ConfigError, "[config] ", source, ": invalid JSON (", e.what(), ")");
  }
  if (!j.is_object()) UNILLM_THROW(ConfigError, "[config] ", source, ": expected a JSON object of arguments");
  std::map<std::string, Field> fields;
  std::vector<std::string> warnings;
  // run_finetune.py's fixed semantics: supervised fine-tuning, full unless `lora`, no recompute
  // unless `recompute`.
  fields["stage"] = Field{"stage", YAML::Node("sft"), source + " (PaddleNLP run_finetune)"};
  fields["finetuning_type"] = Field{"finetuning_type", YAML::Node("full"), source};
  fields["disable_gradient_checkpointing"] = Field{"disable_gradient_checkpointing", YAML::Node("true"), source};
  for (auto it = j.begin(); it != j.end(); ++it)
    translate(it.key(), to_yaml(it.value()), where_in(json_text, source, it.key()), fields, warnings);
  for (const auto& ov : overrides) {
    const size_t eq = ov.find('=');
    if (eq == std::string::npos || eq == 0)
      UNILLM_THROW(ConfigError, "[config] command line: expected key=value, got '", ov, "'");
    YAML::Node value;
    try {
      value = YAML::Load(ov.substr(eq + 1));
    } catch (const YAML::Exception&) {
      value = YAML::Node(ov.substr(eq + 1));
    }
    translate(ov.substr(0, eq), value, "command line", fields, warnings);
  }
  TrainArgs a = detail::apply_fields(fields, source);
  a.warnings.insert(a.warnings.begin(), warnings.begin(), warnings.end());
  return a;
}

}  // namespace unillm::train
