#include "cli/accelerate_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"

namespace unillm::cli {
namespace {

// "F line N" of a node (yaml-cpp's marks count from 0).
std::string where(const std::string& path, const YAML::Node& n) {
  return n.Mark().line >= 0 ? path + " line " + std::to_string(n.Mark().line + 1) : path;
}

std::string scalar(const std::string& path, const std::string& key, const YAML::Node& n) {
  if (!n.IsScalar()) UNILLM_THROW(ConfigError, "[launch] ", where(path, n), ": ", key, " must be a single value");
  return n.Scalar();
}

bool flag(const std::string& path, const std::string& key, const YAML::Node& n) {
  const std::string v = scalar(path, key, n);
  if (v == "true" || v == "True") return true;
  if (v == "false" || v == "False") return false;
  UNILLM_THROW(ConfigError, "[launch] ", where(path, n), ": ", key, " is '", v, "'; expected true or false");
}

int64_t count(const std::string& path, const std::string& key, const YAML::Node& n, int64_t min) {
  const std::string v = scalar(path, key, n);
  int64_t x = 0;
  try {
    size_t used = 0;
    x = std::stoll(v, &used);
    if (used != v.size()) x = min - 1;
  } catch (const std::exception&) {
    x = min - 1;
  }
  if (x < min) UNILLM_THROW(ConfigError, "[launch] ", where(path, n), ": ", key, " is '", v, "'; expected a number >= ", min);
  return x;
}

void check_keys(const std::string& path, const YAML::Node& map, const std::string& section,
                const std::set<std::string>& known) {
  for (const auto& kv : map)
    if (!known.count(kv.first.Scalar()))
      UNILLM_THROW(ConfigError, "[launch] ", where(path, kv.first), ": unknown accelerate key '",
                   section.empty() ? "" : section + ".", kv.first.Scalar(), "'");
}

// FSDP's plugin as HF's `fsdp` words (train/args_parallel.cpp maps them onto ZeRO).
std::string fsdp_words(const std::string& path, const YAML::Node& f) {
  check_keys(path, f, "fsdp_config",
             {"fsdp_version", "fsdp_sharding_strategy", "fsdp_reshard_after_forward", "fsdp_offload_params",
              // How torch wraps, prefetches, loads and saves: unillm's units are the decoder layers,
              // its loading and its checkpoints (one process's HF files) are its own.
              "fsdp_auto_wrap_policy", "fsdp_transformer_layer_cls_to_wrap", "fsdp_min_num_params",
              "fsdp_backward_prefetch", "fsdp_forward_prefetch", "fsdp_cpu_ram_efficient_loading",
              "fsdp_state_dict_type", "fsdp_sync_module_states", "fsdp_use_orig_params",
              "fsdp_activation_checkpointing"});
  const int64_t version = f["fsdp_version"] ? count(path, "fsdp_version", f["fsdp_version"], 1) : 1;
  if (version > 2)
    UNILLM_THROW(ConfigError, "[launch] ", where(path, f["fsdp_version"]), ": fsdp_version ", version, "; expected 1 or 2");
  std::string words = "full_shard";
  if (const YAML::Node s = f["fsdp_sharding_strategy"]) {
    // accelerate takes the enum's name or its number (1 FULL_SHARD … 5 HYBRID_SHARD_ZERO2).
    static const std::vector<std::string> names = {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD",
                                                   "HYBRID_SHARD_ZERO2"};
    std::string v = scalar(path, "fsdp_config.fsdp_sharding_strategy", s);
    if (v.size() == 1 && v[0] >= '1' && v[0] <= '5') v = names[static_cast<size_t>(v[0] - '1')];
    if (std::find(names.begin(), names.end(), v) == names.end())
      UNILLM_THROW(ConfigError, "[launch] ", where(path, s), ": fsdp_config.fsdp_sharding_strategy '", v,
                   "'; expected FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD or HYBRID_SHARD_ZERO2 (or 1-5)");
    words = v;
    std::transform(words.begin(), words.end(), words.begin(), [](unsigned char c) { return std::tolower(c); });
  }
  // FSDP2 names the strategy by whether parameters are freed again after the forward.
  if (const YAML::Node r = f["fsdp_reshard_after_forward"])
    words = flag(path, "fsdp_config.fsdp_reshard_after_forward", r) ? "full_shard" : "shard_grad_op";
  if (f["fsdp_offload_params"] && flag(path, "fsdp_config.fsdp_offload_params", f["fsdp_offload_params"]))
    words += " offload";
  return words;
}

// DeepSpeed's plugin: its JSON file as is, or the ZeRO stage and offload it names (HF's Trainer
// takes accumulation and clipping from the training config).
std::string deepspeed_value(const std::string& path, const YAML::Node& d) {
  check_keys(path, d, "deepspeed_config",
             {"deepspeed_config_file", "zero_stage", "offload_optimizer_device", "offload_param_device",
              "gradient_accumulation_steps", "gradient_clipping", "zero3_init_flag", "zero3_save_16bit_model",
              "deepspeed_multinode_launcher", "deepspeed_hostfile", "offload_optimizer_nvme_path",
              "offload_param_nvme_path", "deepspeed_moe_layer_cls_names"});
  if (const YAML::Node file = d["deepspeed_config_file"]) return scalar(path, "deepspeed_config.deepspeed_config_file", file);
  nlohmann::json z = {{"stage", d["zero_stage"] ? count(path, "deepspeed_config.zero_stage", d["zero_stage"], 0) : 2}};
  for (const char* k : {"offload_optimizer", "offload_param"}) {
    const std::string key = std::string(k) + "_device";
    if (const YAML::Node dev = d[key]) {
      const std::string v = scalar(path, "deepspeed_config." + key, dev);
      if (v != "none") z[k] = {{"device", v}};
    }
  }
  return nlohmann::json{{"zero_optimization", z}}.dump();
}

}  // namespace

AccelerateLaunch read_accelerate_config(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    UNILLM_THROW(IoError, "[launch] --config_file ", path, ": cannot read it");
  } catch (const YAML::Exception& e) {
    UNILLM_THROW(ConfigError, "[launch] ", path, ": not valid YAML (", e.what(), ")");
  }
  if (!root.IsMap()) UNILLM_THROW(ConfigError, "[launch] ", path, ": not an accelerate config (a YAML map)");
  check_keys(path, root, "",
             {"compute_environment", "debug", "distributed_type", "downcast_bf16", "enable_cpu_affinity", "gpu_ids",
              "machine_rank", "main_process_ip", "main_process_port", "main_training_function", "mixed_precision",
              "num_machines", "num_processes", "rdzv_backend", "same_network", "tpu_env", "tpu_use_cluster",
              "tpu_use_sudo", "use_cpu", "dynamo_config", "fsdp_config", "deepspeed_config", "ipex_config",
              "mpirun_config"});
  AccelerateLaunch out;
  if (root["num_processes"]) out.num_processes = count(path, "num_processes", root["num_processes"], 1);
  if (root["num_machines"]) out.num_machines = count(path, "num_machines", root["num_machines"], 1);
  if (const YAML::Node env = root["compute_environment"]; env && scalar(path, "compute_environment", env) != "LOCAL_MACHINE")
    UNILLM_THROW(ConfigError, "[launch] ", where(path, env), ": compute_environment ", env.Scalar(),
                 ": only LOCAL_MACHINE (processes started here, over Open MPI)");
  const std::string type = root["distributed_type"] ? scalar(path, "distributed_type", root["distributed_type"]) : "NO";
  if (type == "FSDP") {
    if (!root["fsdp_config"] || !root["fsdp_config"].IsMap())
      UNILLM_THROW(ConfigError, "[launch] ", path, ": distributed_type FSDP without an fsdp_config map");
    const std::string words = fsdp_words(path, root["fsdp_config"]);
    out.train_overrides.push_back("fsdp=" + words);
    out.notes.push_back("FSDP (" + words + ")");
  } else if (type == "DEEPSPEED") {
    if (!root["deepspeed_config"] || !root["deepspeed_config"].IsMap())
      UNILLM_THROW(ConfigError, "[launch] ", path, ": distributed_type DEEPSPEED without a deepspeed_config map");
    const std::string ds = deepspeed_value(path, root["deepspeed_config"]);
    out.train_overrides.push_back("deepspeed=" + ds);
    out.notes.push_back("DeepSpeed (" + ds + ")");
  } else if (type == "NO" || type.rfind("MULTI_", 0) == 0) {
    out.notes.push_back("data parallel");  // DDP over the processes
  } else {
    UNILLM_THROW(ConfigError, "[launch] ", where(path, root["distributed_type"]), ": distributed_type ", type,
                 " is not run by unillm (NO, MULTI_CPU/GPU/NPU/…, FSDP and DEEPSPEED are)");
  }
  // HF's TrainingArguments keep accelerate's mixed precision only when they set neither bf16 nor
  // fp16 themselves (their own keys override it): `unillm train` applies it then.
  if (const YAML::Node mp = root["mixed_precision"]; mp && scalar(path, "mixed_precision", mp) != "no") {
    if (mp.Scalar() != "bf16" && mp.Scalar() != "fp16")
      UNILLM_THROW(ConfigError, "[launch] ", where(path, mp), ": mixed_precision '", mp.Scalar(),
                   "'; expected no, bf16 or fp16");
    out.mixed_precision = mp.Scalar();
    out.notes.push_back("mixed_precision " + mp.Scalar() + " where the training config sets neither bf16 nor fp16");
  }
  return out;
}

}  // namespace unillm::cli
