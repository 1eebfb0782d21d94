// The PaddleNLP dialect: a JSON argument file of llm/run_finetune.py (ModelArgument,
// DataArgument and PaddleNLP's TrainingArguments) or, when it names input_dir, of
// llm/run_pretrain.py (PreTrainingArguments), mapped onto unillm's keys. The map is
// docs/paddlenlp.md; keys shared with HF TrainingArguments pass through unchanged.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "core/error.h"
#include "train/args_internal.h"
#include "train/key_table.h"

namespace unillm::train {

using detail::Field;

namespace {

enum class Map {
  kSame,              // the same key in unillm's table
  kLora,              // lora: true → finetuning_type lora (else full)
  kRecompute,         // recompute → disable_gradient_checkpointing = !recompute
  kRslora,            // rslora → use_rslora
  kPositiveOrUnset,   // lora_alpha: PaddleNLP's -1 means "unset"
  kIgnored,           // Paddle-only performance or checkpoint-format switch: warn when on
  kNotImplemented,    // a method unillm does not have: refused when on
  kInputDir,          // input_dir: run_pretrain.py's corpus → stage pt from that corpus
  kMaxSeqLength,      // run_pretrain.py's max_seq_length → cutoff_len (the block length)
  kDirect,            // an HF key the YAML table does not implement yet: set through its setter
  kPretrainOnly,      // min_learning_rate, decay_steps: run_pretrain.py's schedule
  kTokenizer,         // tokenizer_name_or_path: run_pretrain.py loads it; run_finetune.py does not
  kDoPredict,         // run_pretrain.py: evaluate split's test part; run_finetune.py: test.json
  kContinueTraining,  // run_pretrain: false (its default) initialises at random from the config
  kNeftune,           // neftune / neftune_noise_alpha: NEFTune only with neftune true (alpha 5.0)
  kLoraPlus,          // lora_plus_scale: lora_B's learning-rate multiplier → loraplus_lr_ratio
  kRsloraPlus,        // rslora_plus: rslora, lora_plus_scale 4 and lora_alpha 4 (finish_lora)
  kPissa,             // pissa: PiSSA from the full SVD with scaling 1 (finish_lora)
};

// PaddleNLP-only keys (names as in llm/run_finetune.py's argument classes).
const std::map<std::string, Map>& paddle_keys() {
  static const std::map<std::string, Map> m = {
      {"dataset_name_or_path", Map::kSame},
      {"src_length", Map::kSame},
      {"max_length", Map::kSame},
      {"zero_padding", Map::kSame},
      {"lora_rank", Map::kSame},
      {"lora", Map::kLora},
      {"recompute", Map::kRecompute},
      {"rslora", Map::kRslora},
      {"lora_alpha", Map::kPositiveOrUnset},
      {"use_flash_attention", Map::kIgnored},
      {"use_fused_rms_norm", Map::kIgnored},
      {"use_fused_rope", Map::kIgnored},
      {"use_fused_linear", Map::kIgnored},
      {"unified_checkpoint", Map::kIgnored},
      {"unified_checkpoint_config", Map::kIgnored},
      {"fp16_opt_level", Map::kIgnored},
      {"amp_master_grad", Map::kIgnored},
      {"eval_with_do_generation", Map::kIgnored},
      {"sharding", Map::kSame},
      {"pipeline_parallel_config", Map::kIgnored},
      {"tensor_parallel_config", Map::kIgnored},
      {"sharding_parallel_config", Map::kIgnored},
      {"recompute_granularity", Map::kIgnored},
      {"flash_mask", Map::kIgnored},
      {"eval_accumulation_steps", Map::kIgnored},
      {"continue_training", Map::kContinueTraining},
      {"benchmark", Map::kIgnored},
      {"device", Map::kIgnored},
      {"use_quick_lora", Map::kIgnored},
      {"greedy_zero_padding", Map::kNotImplemented},
      {"tensor_parallel_degree", Map::kSame},
      {"expert_parallel_degree", Map::kSame},
      {"tensor_parallel_output", Map::kSame},
      {"fuse_attention_qkv", Map::kIgnored},
      {"fuse_attention_ffn", Map::kIgnored},
      {"enable_linear_fused_grad_add", Map::kIgnored},
      {"recompute_use_reentrant", Map::kIgnored},
      {"load_sharded_model", Map::kIgnored},
      {"save_sharded_model", Map::kIgnored},
      {"force_reshard_pp", Map::kIgnored},
      {"pad_to_multiple_of", Map::kIgnored},
      {"pipeline_parallel_degree", Map::kSame},
      {"sharding_parallel_degree", Map::kSame},
      {"sep_parallel_degree", Map::kSame},
      {"context_parallel_degree", Map::kSame},
      {"prefix_tuning", Map::kNotImplemented},
      {"pissa", Map::kPissa},
      {"dora", Map::kNotImplemented},
      {"lora_plus_scale", Map::kLoraPlus},
      {"rslora_plus", Map::kRsloraPlus},
      {"vera", Map::kNotImplemented},
      {"lokr", Map::kNotImplemented},
      {"reft", Map::kNotImplemented},
      {"do_ptq", Map::kNotImplemented},
      {"do_qat", Map::kNotImplemented},
      {"do_gptq", Map::kNotImplemented},
      {"weight_quantize_algo", Map::kNotImplemented},
      {"neftune", Map::kNeftune},
      {"neftune_noise_alpha", Map::kNeftune},
      // llm/run_pretrain.py (pre-tokenised corpora; docs/corpora.md)
      {"input_dir", Map::kInputDir},
      {"split", Map::kSame},
      {"max_seq_length", Map::kMaxSeqLength},
      {"data_impl", Map::kIgnored},
      {"data_cache", Map::kIgnored},
      {"skip_warmup", Map::kIgnored},
      {"share_folder", Map::kIgnored},
      {"distributed_dataloader", Map::kIgnored},
      {"virtual_pp_degree", Map::kSame},
      {"sequence_parallel", Map::kSame},
      {"min_learning_rate", Map::kPretrainOnly},
      {"decay_steps", Map::kPretrainOnly},
      {"tokenizer_name_or_path", Map::kTokenizer},
      {"do_predict", Map::kDoPredict},
      // HF TrainingArguments keys that the YAML dialect does not implement yet
      {"load_best_model_at_end", Map::kDirect},
      {"metric_for_best_model", Map::kDirect},
      {"greater_is_better", Map::kDirect},
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

// What a PaddleNLP file translates into.
struct Translation {
  bool pretrain = false;                // input_dir given: an llm/run_pretrain.py file
  std::map<std::string, Field> fields;  // through the key table
  std::map<std::string, Field> direct;  // through the setters (Map::kDirect, PaddleNLP-only keys)
  std::vector<std::string> warnings;
  bool continue_training_given = false;
  bool neftune = false;                 // PaddleNLP's switch; its alpha (default 5.0) below
  std::optional<Field> neftune_alpha;
  // run_finetune.py's LoRA defaults depend on several keys (finish_lora).
  bool rslora = false, rslora_plus = false, pissa = false, alpha_given = false;
  std::string pissa_where, rslora_plus_where, rslora_where;
};

// A PaddleNLP boolean: its argument parser reads "--lora VALUE" with strtobool, so true/false and
// yes/no, y/n, t/f, 1/0 in any case; anything else ("maybe", 2) is refused, as PaddleNLP does.
bool paddle_bool(const std::string& key, const YAML::Node& v, const std::string& where) {
  std::string s = v.IsScalar() ? v.Scalar() : "";
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const char* yes : {"true", "yes", "y", "t", "1", "on"})
    if (s == yes) return true;
  for (const char* no : {"false", "no", "n", "f", "0", "off"})
    if (s == no) return false;
  UNILLM_THROW(ConfigError, "[config] ", where, ": PaddleNLP key '", key,
               "' must be true or false, got ",
               v.IsScalar() ? "'" + v.Scalar() + "'" : v.IsNull() ? "null" : "a list or map");
}

void warn_ignored(Translation& t, const std::string& key, const std::string& where,
                  const std::string& why) {
  t.warnings.push_back("[config] " + where + ": PaddleNLP key '" + key +
                       "' is accepted and ignored by unillm" + why);
}

// Why an accepted Paddle-only switch changes nothing here ("" for the plain notice).
std::string ignored_because(const std::string& key) {
  static const std::map<std::string, std::string> why = {
      {"fuse_attention_qkv", "q/k/v are always one fused projection"},
      {"fuse_attention_ffn", "gate/up are always one fused projection"},
      {"enable_linear_fused_grad_add", "weight gradients accumulate into the gradient arena directly"},
      {"recompute_use_reentrant", "recompute re-runs each layer's segments in backward either way"},
      {"load_sharded_model", "checkpoints are unified HF dirs whatever the layout; any layout resumes them"},
      {"save_sharded_model", "checkpoints are unified HF dirs whatever the layout; any layout resumes them"},
      {"force_reshard_pp", "checkpoints are unified HF dirs whatever the layout; any layout resumes them"},
      {"pad_to_multiple_of", "each micro-batch is padded to its longest row; padding is never scored, so the loss is "
                             "the same"},
  };
  auto it = why.find(key);
  return it == why.end() ? "" : " (" + it->second + ")";
}

// continue_training false (run_pretrain.py's default): PaddleNLP builds the model from its config
// with random weights, as train_from_scratch does; true loads model_name_or_path's weights.
void set_from_scratch(Translation& t, bool from_scratch, const std::string& where) {
  t.fields["train_from_scratch"] =
      Field{"train_from_scratch", YAML::Node(from_scratch ? "true" : "false"), where};
}

// The keys whose meaning depends on the script: run_pretrain.py (t.pretrain) or run_finetune.py.
void translate_by_script(Map m, const std::string& key, const Field& f, Translation& t) {
  const bool on = !detail::is_off(f.node);
  if (t.pretrain) {
    t.direct[key] = f;
    return;
  }
  if (m == Map::kPretrainOnly && key == "min_learning_rate")
    UNILLM_THROW(ConfigError, "[config] ", f.where,
                 ": key 'min_learning_rate' belongs to llm/run_pretrain.py "
                 "(PreTrainingArguments), whose files name input_dir; run_finetune.py refuses it");
  if (m == Map::kDoPredict && on)
    UNILLM_THROW(NotImplemented, "[config] ", f.where,
                 ": PaddleNLP key 'do_predict' in a run_finetune.py file "
                 "(evaluate dataset_name_or_path/test.json) is not implemented yet");
  if (m == Map::kPretrainOnly && on)
    warn_ignored(t, key, f.where, " (run_finetune.py has no schedule that uses it)");
  if (m == Map::kTokenizer && on)
    warn_ignored(t, key, f.where, " (run_finetune.py loads the tokenizer from model_name_or_path)");
}

// Translates one PaddleNLP key into unillm fields.
void translate(const std::string& key, const YAML::Node& v, const std::string& where,
               Translation& t) {
  auto it = paddle_keys().find(key);
  if (it == paddle_keys().end()) {
    if (!find_key(key)) unknown_paddle_key(key, where);
    t.fields[key] = Field{key, v, where};  // an HF TrainingArguments key: the same meaning
    return;
  }
  const std::string via = where + " (PaddleNLP '" + key + "')";
  auto on = [&] { return !detail::is_off(v); };
  // The switches are booleans in PaddleNLP's argument classes: checked as its parser does.
  auto on_bool = [&] { return paddle_bool(key, v, where); };
  auto& out = t.fields;
  switch (it->second) {
    case Map::kSame: out[key] = Field{key, v, where}; break;
    case Map::kLora:
      out["finetuning_type"] = Field{"finetuning_type", YAML::Node(on_bool() ? "lora" : "full"), via};
      break;
    case Map::kRecompute:
      out["disable_gradient_checkpointing"] =
          Field{"disable_gradient_checkpointing", YAML::Node(on_bool() ? "false" : "true"), via};
      break;
    case Map::kRslora:
      out["use_rslora"] = Field{"use_rslora", v, via};
      t.rslora = on_bool();
      t.rslora_where = via;
      break;
    case Map::kPositiveOrUnset:
      if (!(v.IsScalar() && v.Scalar().size() && v.Scalar()[0] == '-')) {
        out[key] = Field{key, v, where};
        t.alpha_given = key == "lora_alpha";
      }
      break;
    case Map::kLoraPlus:  // Paddle's ParamAttr(learning_rate=scale) on lora_B: LoRA+'s ratio
      if (!(v.IsScalar() && (v.Scalar() == "1" || v.Scalar() == "1.0")))
        out["loraplus_lr_ratio"] = Field{"loraplus_lr_ratio", v, via};
      break;
    case Map::kRsloraPlus:
      t.rslora_plus = on_bool();
      t.rslora_plus_where = via;
      break;
    case Map::kPissa:
      t.pissa = on_bool();
      t.pissa_where = via;
      break;
    case Map::kIgnored:
      if (on()) warn_ignored(t, key, where, ignored_because(key));
      break;
    case Map::kInputDir:
      out[key] = Field{key, v, where};
      out["stage"] = Field{"stage", YAML::Node("pt"), via + " (run_pretrain)"};
      break;
    case Map::kMaxSeqLength: out["cutoff_len"] = Field{"cutoff_len", v, via}; break;
    case Map::kNotImplemented:
      if (on()) UNILLM_THROW(NotImplemented, "[config] ", where, ": PaddleNLP key '", key, "' is not implemented yet");
      break;
    case Map::kDirect:
      t.direct[key] = Field{key, v, where};
      break;
    case Map::kContinueTraining:
      t.continue_training_given = true;
      if (t.pretrain)
        set_from_scratch(t, !on_bool(), where + " (PaddleNLP 'continue_training')");
      else  // run_finetune.py always loads the pretrained weights
        warn_ignored(t, key, where, " (run_finetune.py always starts from model_name_or_path)");
      break;
    case Map::kPretrainOnly:
    case Map::kTokenizer:
    case Map::kDoPredict:
      translate_by_script(it->second, key, Field{key, v, where}, t);
      break;
    case Map::kNeftune:
      if (key == "neftune")
        t.neftune = on_bool();
      else
        t.neftune_alpha = Field{"neftune_noise_alpha", v, where};
      break;
  }
}

// PaddleNLP's trainer adds NEFTune noise (HF's formula: uniform ±alpha/√(L·d) on the embedding
// output in training) only with neftune true; neftune_noise_alpha alone changes nothing there.
void finish_neftune(Translation& t, const std::string& source) {
  if (t.neftune) {
    t.fields["neftune_noise_alpha"] =
        t.neftune_alpha ? *t.neftune_alpha
                        : Field{"neftune_noise_alpha", YAML::Node("5.0"), source + " (PaddleNLP 'neftune' default alpha)"};
  } else if (t.neftune_alpha && !detail::is_off(t.neftune_alpha->node)) {
    warn_ignored(t, "neftune_noise_alpha", t.neftune_alpha->where, " (NEFTune needs 'neftune': true, as in PaddleNLP)");
  }
}

// run_finetune.py's LoRA set-up: rslora_plus turns on rslora with lora_plus_scale 4 and
// lora_alpha 4; an unset lora_alpha (-1) is 4 with rslora, else 2 × rank (unillm's default too);
// pissa initialises A and B from the full SVD and makes the scaling 1 whatever alpha and rslora
// say (LoRAConfig.scaling), i.e. alpha = rank without rslora.
void finish_lora(Translation& t) {
  auto set = [&](const char* key, const std::string& value, const std::string& where) {
    t.fields[key] = Field{key, YAML::Node(value), where};
  };
  if (t.rslora_plus) {
    set("use_rslora", "true", t.rslora_plus_where);
    set("loraplus_lr_ratio", "4", t.rslora_plus_where);
    set("lora_alpha", "4", t.rslora_plus_where);
  } else if (t.rslora && !t.alpha_given) {
    set("lora_alpha", "4", t.rslora_where + " (run_finetune.py's lora_alpha with rslora)");
  }
  if (t.pissa) {
    set("pissa_init", "true", t.pissa_where);
    set("pissa_iter", "-1", t.pissa_where + " (a full SVD)");
    set("use_rslora", "false", t.pissa_where + " (scaling 1)");
    const auto rank = t.fields.find("lora_rank");
    set("lora_alpha", rank != t.fields.end() && rank->second.node.IsScalar() ? rank->second.node.Scalar() : "8",
        t.pissa_where + " (scaling 1)");
  }
}

YAML::Node override_value(const std::string& text) {
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception&) {
    return YAML::Node(text);
  }
}

// run_pretrain.py replaces HF's linear and cosine schedules by its annealing ones.
void finish_pretrain(TrainArgs& a, const Translation& t) {
  a.pretrain_annealing = a.lr_scheduler_type == "linear" || a.lr_scheduler_type == "cosine";
  if (a.pretrain_annealing) return;
  for (const char* key : {"min_learning_rate", "decay_steps"})
    if (t.direct.count(key))
      a.warnings.push_back("[config] " + t.direct.at(key).where + ": '" + key +
                           "' applies only to lr_scheduler_type " +
                           "linear or cosine (run_pretrain.py); ignored with '" +
                           a.lr_scheduler_type + "'");
}

}  // namespace

TrainArgs parse_paddle_args(const std::string& json_text, const std::string& source,
                            const std::vector<std::string>& overrides) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::parse_error& e) {
    UNILLM_THROW(ConfigError, "[config] ", source, ": invalid JSON (", e.what(), ")");
  } catch (const nlohmann::json::exception& e) {  // out_of_range: a number overflowing a double
    UNILLM_THROW(ConfigError, "[config] ", source, ": invalid JSON (", e.what(), ")");
  }
  if (!j.is_object()) UNILLM_THROW(ConfigError, "[config] ", source, ": expected a JSON object of arguments");
  Translation t;
  // run_finetune.py's fixed semantics: supervised fine-tuning, full unless `lora`, no recompute
  // unless `recompute`. A file naming input_dir is a run_pretrain.py file instead.
  t.fields["stage"] = Field{"stage", YAML::Node("sft"), source + " (PaddleNLP run_finetune)"};
  t.fields["finetuning_type"] = Field{"finetuning_type", YAML::Node("full"), source};
  t.fields["disable_gradient_checkpointing"] =
      Field{"disable_gradient_checkpointing", YAML::Node("true"), source};
  std::vector<std::pair<std::string, YAML::Node>> given;
  for (auto it = j.begin(); it != j.end(); ++it) given.emplace_back(it.key(), to_yaml(it.value()));
  const size_t from_file = given.size();
  for (const auto& ov : overrides) {
    const size_t eq = ov.find('=');
    if (eq == std::string::npos || eq == 0)
      UNILLM_THROW(ConfigError, "[config] command line: expected key=value, got '", ov, "'");
    given.emplace_back(ov.substr(0, eq), override_value(ov.substr(eq + 1)));
  }
  // An override replaces the file's value before it is translated (tensor_parallel_degree=1
  // rescues a file that asks for 2); keys are translated file first, then overrides in order.
  std::set<std::string> overridden;
  for (size_t i = from_file; i < given.size(); ++i) overridden.insert(given[i].first);
  for (const auto& [key, v] : given)
    t.pretrain = key == "input_dir" ? !detail::is_off(v) : t.pretrain;
  detail::Problems problems;  // every key's problem is reported in one run (args_internal.h)
  for (size_t i = 0; i < given.size(); ++i)
    if (i >= from_file || !overridden.count(given[i].first))
      problems.attempt([&] {
        translate(given[i].first, given[i].second,
                  i < from_file ? where_in(json_text, source, given[i].first) : "command line", t);
      });
  problems.attempt([&] { finish_neftune(t, source); });
  problems.attempt([&] { finish_lora(t); });
  if (t.pretrain && !t.continue_training_given)
    set_from_scratch(t, true, source + " (run_pretrain.py's default continue_training false)");
  TrainArgs a = detail::apply_fields(t.fields, source, t.direct, std::move(problems));
  a.save_final_step = false;  // PaddleNLP's DefaultFlowCallback saves no extra final checkpoint
  if (t.pretrain) finish_pretrain(a, t);
  a.warnings.insert(a.warnings.begin(), t.warnings.begin(), t.warnings.end());
  return a;
}

}  // namespace unillm::train
