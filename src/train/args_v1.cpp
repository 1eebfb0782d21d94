// LLaMA-Factory v1 configs (`USE_V1=1 llamafactory-cli sft CFG`; docs/llamafactory-v1.md): its
// keys (src/llamafactory/v1/config at ff6d4d12: ModelArguments, DataArguments,
// TrainingArguments, SampleArguments and the plugin configs) mapped onto unillm's, with the
// semantics v1's trainer fixes (docs/ARCHITECTURE.md, "LLaMA-Factory's v1 configs").
#include <yaml-cpp/yaml.h>

#include <map>
#include <optional>
#include <set>

#include "core/error.h"
#include "train/args_internal.h"

namespace unillm::train::detail {

namespace {

struct V1 {
  std::map<std::string, Field> fields;  // unillm keys, through the key table
  std::map<std::string, Field> direct;  // the v1-only fields (v1_train_dataset, …)
  std::vector<std::string> warnings;
  std::string source;
  bool exporting = false;  // `unillm export` (v1's merge_and_export_model)
  bool chatting = false;   // `unillm chat` (v1's `llamafactory-cli chat`: cli_sampler.run_chat)
  std::string stage = "sft";  // v1's sub-command: `stage=dpo` stands for `llamafactory-cli dpo`
};

std::string where_of(const std::string& source, const YAML::Node& n) {
  return source == "command line" ? source : UNILLM_MSG(source, " line ", n.Mark().line + 1);
}

// (Fields are erased and re-made, never assigned: assigning a YAML::Node re-points the node it
// was, which would rewrite the parsed file.)
void set(V1& t, const std::string& key, const YAML::Node& v, const std::string& where) {
  t.fields.erase(key);
  t.fields.emplace(key, Field{key, v, where});
}
void set(V1& t, const std::string& key, const std::string& v, const std::string& where) {
  set(t, key, YAML::Node(v), where);
}

void ignored(V1& t, const std::string& key, const std::string& where, const std::string& why) {
  t.warnings.push_back("[config] " + where + ": LLaMA-Factory v1 key '" + key + "' is accepted and ignored (" + why + ")");
}

[[noreturn]] void refuse(const std::string& where, const std::string& key, const std::string& what) {
  UNILLM_THROW(NotImplemented, "[config] ", where, ": LLaMA-Factory v1 ", key, ": ", what, " is not implemented yet");
}

// A plugin config: a name, or a mapping with `name` and the plugin's own keys.
std::string plugin_name(const Field& f) {
  if (f.node.IsScalar()) return f.node.as<std::string>();
  if (!f.node.IsMap() || !f.node["name"] || !f.node["name"].IsScalar())
    UNILLM_THROW(ConfigError, "[config] ", f.where, ": '", f.key, "' needs a `name`");
  return f.node["name"].as<std::string>();
}

// The LoRA plugin (peft.py's LoraParams) onto finetuning_type lora and its v0 keys.
void peft_lora(V1& t, const Field& f) {
  set(t, "finetuning_type", "lora", f.where);
  set(t, "lora_rank", "8", f.where);  // LoraParams' defaults (v0's are the same but for dropout)
  set(t, "lora_alpha", "16", f.where);
  set(t, "lora_dropout", "0.05", f.where);
  set(t, "lora_target", "all", f.where);
  static const std::map<std::string, std::string> keys = {
      {"r", "lora_rank"},         {"lora_alpha", "lora_alpha"}, {"lora_dropout", "lora_dropout"},
      {"target_modules", "lora_target"}, {"use_rslora", "use_rslora"}, {"use_dora", "use_dora"},
      {"modules_to_save", "additional_target"}, {"adapter_name_or_path", "adapter_name_or_path"}};
  for (const auto& kv : f.node) {
    const std::string k = kv.first.as<std::string>(), at = where_of(t.source, kv.first);
    if (k == "name") continue;
    if (auto it = keys.find(k); it != keys.end()) {
      if (!kv.second.IsNull()) set(t, it->second, kv.second, at);
    } else if (k == "export_dir" || k == "export_size" || k == "export_hub_model_id" || k == "infer_dtype" ||
               k == "export_legacy_format") {
      if (!t.exporting) {
        ignored(t, "peft_config." + k, at, "an export key; training does not read it");
      } else if (k == "export_hub_model_id") {
        if (!is_off(kv.second)) ignored(t, "peft_config." + k, at, "pushing to the Hub needs a network");
      } else if (k == "infer_dtype") {
        const std::string d = kv.second.IsScalar() ? kv.second.as<std::string>() : "";
        if (d != "auto")  // auto on a CPU: the base's own dtype, which unillm writes
          refuse(at, "peft_config.infer_dtype", "'" + d + "' (the merged model is written in the base's dtype)");
      } else if (!kv.second.IsNull()) {
        set(t, k, kv.second, at);
      }
    } else {
      UNILLM_THROW(ConfigError, "[config] ", at, ": unknown LoRA key '", k,
                   "' in peft_config (r, lora_alpha, lora_dropout, target_modules, use_rslora, use_dora, "
                   "modules_to_save, adapter_name_or_path)");
    }
  }
}

// The freeze plugin (FreezeParams) onto finetuning_type freeze.
void peft_freeze(V1& t, const Field& f) {
  set(t, "finetuning_type", "freeze", f.where);
  set(t, "freeze_trainable_layers", "2", f.where);
  set(t, "freeze_trainable_modules", "all", f.where);
  for (const auto& kv : f.node) {
    const std::string k = kv.first.as<std::string>(), at = where_of(t.source, kv.first);
    if (k == "name") continue;
    if (k == "freeze_trainable_layers" || k == "freeze_trainable_modules" || k == "freeze_extra_modules") {
      if (!kv.second.IsNull()) set(t, k, kv.second, at);
    } else if (k == "cast_trainable_params_to_fp32") {
      ignored(t, "peft_config." + k, at, "trainable parameters are f32 master copies here");
    } else {
      UNILLM_THROW(ConfigError, "[config] ", at, ": unknown freeze key '", k,
                   "' in peft_config (freeze_trainable_layers, freeze_trainable_modules, freeze_extra_modules, "
                   "cast_trainable_params_to_fp32)");
    }
  }
}

void dist(V1& t, const Field& f) {
  const std::string name = plugin_name(f);
  if (name == "fsdp2" || name == "fsdpturbo") {
    // FSDP2 full sharding: ZeRO stage 3 over the processes. fsdpturbo is FSDP2 with the experts
    // split over ep_size processes: expert parallelism (nn/expert_parallel.h).
    set(t, "fsdp", "full_shard", f.where);
    if (f.node.IsMap())
      for (const auto& kv : f.node) {
        const std::string k = kv.first.as<std::string>(), at = where_of(t.source, kv.first);
        if (k == "offload_params" && !kv.second.IsNull() && kv.second.as<std::string>() == "true")
          set(t, "fsdp", "full_shard offload", at);
        else if (k == "dcp_path" && !kv.second.IsNull())
          refuse(at, "dist_config.dcp_path", "loading a torch distributed checkpoint");
        else if (name == "fsdpturbo" && k == "ep_size")
          set(t, "expert_parallel_degree", kv.second, at);
        else if (name == "fsdpturbo" && (k == "ep_dispatcher" || k == "fsdp_ignored_modules" || k == "hook_modules" ||
                                         k == "fsdp_implementation"))
          ignored(t, "dist_config." + k, at, "how fsdpturbo moves tokens and wraps modules, not what is trained");
        else if (k != "name" && k != "offload_params" && k != "dcp_path")
          ignored(t, "dist_config." + k, at, "an FSDP2 tuning switch");
      }
  } else if (name == "deepspeed") {
    if (!f.node.IsMap() || !f.node["config_file"])
      UNILLM_THROW(ConfigError, "[config] ", f.where, ": dist_config deepspeed needs a config_file");
    set(t, "deepspeed", f.node["config_file"], where_of(t.source, f.node["config_file"]));
  } else {
    UNILLM_THROW(ConfigError, "[config] ", f.where, ": unknown dist_config '", name, "' (fsdp2, deepspeed, fsdpturbo)");
  }
}

// optim_config {name: muon, …}: Moonlight's Muon as v1 builds it, which is unillm's use_muon.
void optim(V1& t, const Field& f) {
  const std::string name = plugin_name(f);
  if (name != "muon") refuse(f.where, "optim_config", "optimizer '" + name + "'");
  set(t, "use_muon", "true", f.where);
  set(t, "weight_decay", "0.1", f.where);  // v1's Muon defaults
  set(t, "adam_beta1", "0.9", f.where);
  set(t, "adam_beta2", "0.95", f.where);
  if (!f.node.IsMap()) return;
  for (const auto& kv : f.node) {
    const std::string k = kv.first.as<std::string>(), at = where_of(t.source, kv.first);
    const YAML::Node& v = kv.second;
    const std::string s = v.IsScalar() ? v.as<std::string>() : "";
    if (k == "name" || k == "lr") continue;  // v1 overrides lr with learning_rate
    if (k == "wd") {
      set(t, "weight_decay", v, at);
    } else if (k == "adamw_eps") {
      set(t, "adam_epsilon", v, at);
    } else if (k == "adamw_betas") {
      if (!v.IsSequence() || v.size() != 2)
        UNILLM_THROW(ConfigError, "[config] ", at, ": adamw_betas must be a list of two numbers");
      set(t, "adam_beta1", v[0], at);
      set(t, "adam_beta2", v[1], at);
    } else if ((k == "momentum" && s != "0.95") || (k == "nesterov" && s != "true") || (k == "ns_steps" && s != "5")) {
      refuse(at, "optim_config." + k, "Muon with " + k + " " + s + " (unillm's Muon: momentum 0.95, nesterov, 5 "
                                                                   "Newton-Schulz steps)");
    } else if (k != "momentum" && k != "nesterov" && k != "ns_steps") {
      UNILLM_THROW(ConfigError, "[config] ", at, ": unknown Muon key '", k,
                   "' (wd, momentum, nesterov, ns_steps, adamw_betas, adamw_eps)");
    }
  }
}

// quant_config {name: bnb | auto, quantization_bit, quantization_type, double_quantization,
// compute_dtype} (quantization.py's BnbParams): bitsandbytes' 4-bit (nf4 by default, double
// quantisation on) or 8-bit base under LoRA, which is v0's quantization_bit (docs/qlora.md).
void quant(V1& t, const Field& f) {
  const std::string name = plugin_name(f);
  if (name != "bnb" && name != "auto")
    UNILLM_THROW(ConfigError, "[config] ", f.where, ": unknown quant_config '", name, "' (auto, bnb)");
  std::optional<YAML::Node> bit;
  for (const auto& kv : f.node) {
    const std::string k = kv.first.as<std::string>(), at = where_of(t.source, kv.first);
    if (k == "name" || kv.second.IsNull()) continue;
    if (k == "quantization_bit")
      bit = kv.second;
    else if (k == "quantization_type" || k == "double_quantization")
      set(t, k, kv.second, at);
    else if (k == "compute_dtype")
      ignored(t, "quant_config.compute_dtype", at, "the dequantised tiles compute in the run's precision");
    else
      UNILLM_THROW(ConfigError, "[config] ", at, ": unknown quant_config key '", k,
                   "' (quantization_bit, quantization_type, double_quantization, compute_dtype)");
  }
  if (!bit && name == "auto") return;  // v1: "No quantization method applied"
  set(t, "quantization_bit", bit ? *bit : YAML::Node("4"), f.where);  // bnb's default: 4
  set(t, "quantization_method", "bitsandbytes", f.where);
  if (!t.fields.count("quantization_type")) set(t, "quantization_type", "nf4", f.where);
  if (!t.fields.count("double_quantization")) set(t, "double_quantization", "true", f.where);
}

void translate(V1& t, const Field& f) {
  const std::string& k = f.key;
  const YAML::Node& v = f.node;
  const std::string s = v.IsScalar() ? v.as<std::string>() : "";
  const bool off = is_off(v);
  // Keys with v0 twins.
  static const std::map<std::string, std::string> same = {
      {"model", "model_name_or_path"},     {"output_dir", "output_dir"},
      {"micro_batch_size", "per_device_train_batch_size"},
      {"cutoff_len", "cutoff_len"},        {"learning_rate", "learning_rate"},
      {"num_train_epochs", "num_train_epochs"}, {"max_steps", "max_steps"},
      {"max_grad_norm", "max_grad_norm"},  {"bf16", "bf16"},
      {"seed", "seed"},                    {"resume_from_checkpoint", "resume_from_checkpoint"},
      {"save_total_limit", "save_total_limit"}, {"logging_steps", "logging_steps"},
      {"trust_remote_code", "trust_remote_code"}, {"dist_timeout", "ddp_timeout"}};
  if (auto it = same.find(k); it != same.end()) {
    if (!v.IsNull()) set(t, it->second, v, f.where);
    return;
  }
  if (t.chatting && (k == "max_new_tokens" || k == "sample_backend")) {  // v1's SampleArguments
    if (k == "max_new_tokens" && !v.IsNull()) set(t, "max_new_tokens", v, f.where);
    if (k == "sample_backend" && s != "hf")
      t.warnings.push_back("[config] " + f.where + ": sample_backend " + s +
                           ": unillm's own engine generates (paged KV cache)");
    return;
  }
  if (k == "train_dataset" && t.chatting && !off)
    refuse(f.where, "train_dataset", "under chat (v1 batch-infers the set and keeps nothing; unillm chat is the "
           "interactive session, and `unillm train` with do_predict writes predictions)");
  if (k == "train_dataset") {
    t.direct.erase("v1_train_dataset");
    t.direct.emplace("v1_train_dataset", Field{"v1_train_dataset", v, f.where});
  } else if (k == "global_batch_size") {
    if (!v.IsNull()) t.direct.emplace("v1_global_batch_size", Field{"v1_global_batch_size", v, f.where});
  } else if (k == "save_steps") {
    if (!v.IsNull()) {
      set(t, "save_strategy", "steps", f.where);
      set(t, "save_steps", v, f.where);
    }
  } else if (k == "enable_activation_checkpointing") {
    set(t, "disable_gradient_checkpointing", get_bool(f) ? "false" : "true", f.where);
  } else if (k == "peft_config") {
    if (off) return;
    const std::string name = plugin_name(f);
    if (name == "lora")
      peft_lora(t, f);
    else if (name == "freeze")
      peft_freeze(t, f);
    else
      UNILLM_THROW(ConfigError, "[config] ", f.where, ": unknown peft_config '", name, "' (lora, freeze)");
  } else if (k == "dist_config") {
    if (!off) dist(t, f);
  } else if (k == "optim_config") {
    if (!off) optim(t, f);
  } else if (k == "model_class") {
    if (s != "llm") refuse(f.where, "model_class", "'" + s + "' (unillm trains text-only causal LMs: llm)");
  } else if (k == "kernel_config") {
    if (!off) ignored(t, k, f.where, "unillm picks its kernels at run time for the CPU it runs on");
  } else if (k == "flash_attn" || k == "batching_workers" || k == "full_determinism" || k == "sample_backend" ||
             k == "max_new_tokens" || k == "mp_replicate_size" || k == "mp_shard_size" || k == "dp_size") {
    if (!off)
      ignored(t, k, f.where,
              k == "flash_attn"         ? "the attention kernel is chosen at run time"
              : k == "batching_workers" ? "data is prepared before training"
              : k == "full_determinism" ? "unillm's runs are deterministic"
              : k == "sample_backend" || k == "max_new_tokens" ? "a sampling key; training does not read it"
                                                               : "the mesh follows the process count");
  } else if (k == "batching_strategy") {
    // padding_free packs each micro-batch's samples into one row with per-sample attention and
    // positions (flash attention's varlen on a GPU): the same micro-batches and loss as normal.
    if (s == "padding_free")
      ignored(t, k, f.where, "padding_free trains the same micro-batches as normal, one sample's tokens never "
                             "seeing another's; rows are padded per micro-batch here, with the same loss");
    else if (s == "dynamic_batching" || s == "dynamic_padding_free")  // data::LoaderOptions::token_budget
      t.direct.emplace("v1_batching", Field{"v1_batching", v, f.where});
    else if (s != "normal")
      UNILLM_THROW(ConfigError, "[config] ", f.where, ": unknown batching_strategy '", s,
                   "' (normal, padding_free, dynamic_batching, dynamic_padding_free)");
  } else if (k == "cp_size") {  // context parallelism: the attention's heads split, Ulysses's layout
    if (!off) set(t, "context_parallel_degree", v, f.where);
  } else if (k == "cp_mode") {
    if (!off && s != "ulysses")
      UNILLM_THROW(ConfigError, "[config] ", f.where, ": unknown cp_mode '", s, "' (ulysses)");
  } else if (k == "quant_config") {
    if (!off) quant(t, f);
  } else if (k == "init_config") {  // where weights are first placed (meta, rank 0, default device)
    const std::string name = off ? "" : plugin_name(f);
    if (!off && name != "init_on_meta" && name != "init_on_rank0" && name != "init_on_default")
      UNILLM_THROW(ConfigError, "[config] ", f.where, ": unknown init_config '", name,
                   "' (init_on_meta, init_on_rank0, init_on_default)");
    if (!off) ignored(t, k, f.where, "each process reads its weights straight into place");
  } else if (k == "lr_scheduler_config") {
    if (!off)
      UNILLM_THROW(ConfigError, "[config] ", f.where,
                   ": LLaMA-Factory v1 registers no learning-rate scheduler plugin (its runs keep the rate constant)");
  } else if (k == "custom_chat_template") {
    if (!off) refuse(f.where, "custom_chat_template", "a chat template given in the config");
  } else if (k == "eval_dataset") {
    if (!off) ignored(t, k, f.where, "v1's trainer does not evaluate");
  } else if (k == "save_epochs" || k == "save_ckpt_as_hf") {
    if (!off) refuse(f.where, k, k == "save_epochs" ? "checkpoints every N epochs" : "HF-format checkpoints");
  } else if (k == "pref_loss" || k == "pref_beta" || k == "pref_ftx" || k == "simpo_gamma" ||
             k == "dpo_label_smoothing" || k == "ld_alpha") {
    if (t.stage != "dpo") {
      ignored(t, k, f.where, "a preference key; v1's " + t.stage + " does not read it");
    } else if (k == "pref_loss" && s != "sigmoid" && s != "orpo" && s != "simpo") {
      UNILLM_THROW(ConfigError, "[config] ", f.where, ": pref_loss '", s, "': LLaMA-Factory v1's dpo has sigmoid, orpo "
                   "and simpo");
    } else if (!v.IsNull()) {
      set(t, k, v, f.where);  // the same keys, the same meaning as v0's DPO
    }
  } else if (k == "stage") {  // `unillm train CFG stage=…` stands for v1's sub-command (read first)
  } else {
    UNILLM_THROW(ConfigError, "[config] ", f.where, ": unknown LLaMA-Factory v1 key '", k,
                 "' (this file is read as a v1 config: it names train_dataset or micro_batch_size)");
  }
}

}  // namespace

bool set_v1_field(TrainArgs& a, const Field& f) {
  if (f.key == "v1_train_dataset") {
    a.v1_train_dataset = get_string(f);
  } else if (f.key == "v1_global_batch_size") {
    a.v1_global_batch_size = get_int(f, 1);
  } else if (f.key == "v1_batching") {
    a.v1_batching = get_string(f);
  } else if (f.key == "decay_all_params") {
    a.decay_all_params = get_bool(f);
  } else {
    return false;
  }
  return true;
}

bool is_v1_config(const YAML::Node& root) {
  if (!root.IsMap() || root["model_name_or_path"]) return false;
  if (root["train_dataset"]) return true;
  return root["model"] && (root["micro_batch_size"] || root["peft_config"] || root["dist_config"]);
}

TrainArgs parse_v1_args(const YAML::Node& root, const std::string& source,
                        const std::vector<std::string>& overrides, ConfigUse use) {
  V1 t;
  t.source = source;
  t.exporting = use == ConfigUse::kExport;
  t.chatting = use == ConfigUse::kChat;
  // v1's trainer, spelled in unillm's keys: SFT; torch.optim.AdamW(lr) (betas 0.9/0.999, eps 1e-8,
  // weight decay 0.01 on one group) under LambdaLR(1.0); checkpoints only with save_steps (none at
  // the end); a log line every step; bf16 and activation checkpointing on unless turned off.
  const std::string fixed = source + " (LLaMA-Factory v1)";
  for (const auto& [k, v] : t.exporting || t.chatting ? std::vector<std::pair<std::string, std::string>>{}
                                        : std::vector<std::pair<std::string, std::string>>{
           {"stage", "sft"}, {"do_train", "true"}, {"finetuning_type", "full"}, {"weight_decay", "0.01"},
           {"adam_beta1", "0.9"}, {"adam_beta2", "0.999"}, {"adam_epsilon", "1e-8"},
           {"lr_scheduler_type", "constant"}, {"warmup_steps", "0"}, {"save_strategy", "no"},
           {"logging_steps", "1"}, {"bf16", "true"}, {"cutoff_len", "2048"}, {"learning_rate", "1e-4"},
           {"num_train_epochs", "3"}, {"max_grad_norm", "1.0"}, {"seed", "42"}})
    set(t, k, v, fixed);
  if (!t.exporting && !t.chatting) t.direct.emplace("decay_all_params", Field{"decay_all_params", YAML::Node("true"), fixed});
  Problems problems;
  // The file's keys in order, then the command line's (OmegaConf.from_cli: `key=value`, and
  // `parent.child=value` editing one entry of a mapping such as dist_config).
  std::vector<Field> given;
  for (const auto& kv : root)
    if (kv.first.IsScalar()) given.push_back(Field{kv.first.as<std::string>(), kv.second, where_of(source, kv.first)});
  for (const auto& ov : overrides) {
    const size_t eq = ov.find('=');
    if (eq == std::string::npos || eq == 0) {
      problems.add("[config] command line: expected key=value, got '" + ov + "'", true);
      continue;
    }
    YAML::Node v;
    try {
      v = YAML::Load(ov.substr(eq + 1));
    } catch (const YAML::Exception&) {
      v = YAML::Node(ov.substr(eq + 1));
    }
    std::string key = ov.substr(0, eq);
    const size_t dot = key.find('.');
    if (dot != std::string::npos) {
      const std::string parent = key.substr(0, dot), child = key.substr(dot + 1);
      const Field* old = nullptr;
      for (const Field& f : given)
        if (f.key == parent && f.node.IsMap()) old = &f;
      YAML::Node map = old ? YAML::Clone(old->node) : YAML::Node(YAML::NodeType::Map);
      map[child] = v;
      key = parent;
      v.reset(map);
    }
    std::vector<Field> kept;
    for (const Field& f : given)
      if (f.key != key) kept.push_back(f);
    kept.push_back(Field{key, v, "command line"});
    given.swap(kept);
  }
  // The stage first: it decides what the preference keys mean.
  for (const Field& f : given)
    if (f.key == "stage")
      problems.attempt([&] {
        t.stage = get_string(f);
        if (t.stage != "sft" && t.stage != "dpo" && t.stage != "rm")
          UNILLM_THROW(ConfigError, "[config] ", f.where, ": stage '", t.stage,
                       "': LLaMA-Factory v1's trainers are sft, dpo and rm (llamafactory-cli sft|dpo|rm)");
      });
  if (t.stage == "dpo") set(t, "stage", "dpo", source + " (stage=dpo: llamafactory-cli dpo)");
  if (t.stage == "rm") set(t, "stage", "rm", source + " (stage=rm: llamafactory-cli rm)");
  for (const Field& f : given) problems.attempt([&] { translate(t, f); });
  // v1's dynamic_batching is step-driven (its TrainingArguments check).
  if (auto it = t.direct.find("v1_batching"); it != t.direct.end() && it->second.node.as<std::string>() == "dynamic_batching") {
    auto steps = t.fields.find("max_steps");
    if (steps == t.fields.end() || is_off(steps->second.node) || steps->second.node.as<std::string>().rfind('-', 0) == 0)
      problems.add("[config] " + it->second.where + ": batching_strategy dynamic_batching needs max_steps (its "
                   "micro-batches follow a token budget, so an epoch has no fixed number of steps; as v1)", true);
  }
  if (t.chatting) {  // v1's training keys in a chat config: said, not used
    for (const auto& [k, f] : t.direct)
      t.warnings.push_back("[config] " + f.where + ": a v1 training key (" + k.substr(k.rfind("v1_", 0) == 0 ? 3 : 0) +
                           ") is not used by `unillm chat`; ignored");
    t.direct.clear();
  }
  if (!t.exporting && !t.chatting && !t.direct.count("v1_train_dataset"))
    problems.add("[config] " + source + ": a LLaMA-Factory v1 config needs train_dataset", true);
  if (t.exporting) {  // merge_and_export_model: a LoRA peft_config naming the adapter and export_dir
    const auto lora = t.fields.find("finetuning_type");
    if (lora == t.fields.end() || lora->second.node.as<std::string>() != "lora")
      problems.add("[config] " + source + ": a LLaMA-Factory v1 export needs peft_config {name: lora, "
                   "adapter_name_or_path, export_dir} (only LoRA adapters can be merged)", true);
    if (!t.fields.count("adapter_name_or_path"))
      problems.add("[config] " + source + ": a LLaMA-Factory v1 export needs peft_config.adapter_name_or_path", true);
    for (const char* k : {"lora_rank", "lora_alpha", "lora_dropout", "lora_target"}) t.fields.erase(k);
  }
  TrainArgs a = apply_fields(t.fields, source, t.direct, std::move(problems), use);
  a.save_final_step = false;  // v1 saves checkpoints every save_steps only, then the model
  a.v1_config = true;
  a.warnings.insert(a.warnings.begin(), t.warnings.begin(), t.warnings.end());
  return a;
}

}  // namespace unillm::train::detail
