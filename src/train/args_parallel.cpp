// The keys that ask for sharded data parallelism, mapped onto ZeRO (train/zero.h): HF's
// `deepspeed` (a DeepSpeed JSON file, as LLaMA-Factory's examples/deepspeed/ds_z*_config.json),
// HF's `fsdp` / `fsdp_config`, PaddleNLP's `sharding` / `sharding_parallel_degree`, and
// accelerate's `parallelism_config` (its tp_size and dp_shard_size).
// DeepSpeed's "auto" values are resolved from the training keys as HF's
// HfTrainerDeepSpeedConfig does, and a value that is not "auto" must agree with them (HF refuses
// a mismatch too). Keys that only tune communication (bucket sizes, overlap_comm, prefetch) are
// accepted: unillm's collectives have no such knobs.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "train/args_internal.h"

namespace unillm::train::detail {

namespace {

namespace fs = std::filesystem;


void set_deepspeed(TrainArgs& a, const Field& f) {
  a.deepspeed_text.clear();
  a.zero_stage = 0;
  a.zero_offload = false;
  a.zero_from.clear();
  if (is_off(f.node)) return;
  std::string text, source;
  if (f.node.IsScalar()) {  // a path; HF also takes a JSON string
    const std::string v = f.node.Scalar();
    if (!v.empty() && v[0] == '{') {
      text = v, source = f.where;
    } else {
      text = read_config_text(f, v), source = v;
    }
  } else if (f.node.IsMap()) {  // an inline dict: its JSON form
    text = yaml_to_json(f.node).dump(), source = f.where;
  } else {
    bad_value(f, "the path of a DeepSpeed JSON config");
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    UNILLM_THROW(ConfigError, "[config] ", f.where, ": deepspeed: ", source, " is not valid JSON (", e.what(), ")");
  }
  if (!j.is_object()) UNILLM_THROW(ConfigError, "[config] ", f.where, ": deepspeed: ", source, " is not a JSON object");
  a.deepspeed_text = j.dump();
  a.deepspeed_where = source;
  const nlohmann::json z = j.value("zero_optimization", nlohmann::json::object());
  const nlohmann::json stage = z.value("stage", nlohmann::json(0));
  if (!stage.is_number_integer() || stage.get<int64_t>() < 0 || stage.get<int64_t>() > 3)
    UNILLM_THROW(ConfigError, "[config] ", source, ": zero_optimization.stage is ", stage.dump(),
                 "; expected 0, 1, 2 or 3");
  a.zero_stage = stage.get<int64_t>();
  for (const char* k : {"offload_optimizer", "offload_param"})
    if (z.contains(k) && z[k].is_object() && z[k].value("device", std::string("none")) != "none") {
      const std::string dev = z[k].value("device", std::string());
      if (dev != "cpu")
        UNILLM_THROW(NotImplemented, "[config] ", source, ": zero_optimization.", k, ".device '", dev,
                     "': only cpu offload is implemented");
      a.zero_offload = true;
    }
  a.zero_from = f.where + " (deepspeed: " + source + ")";
}

// HF's fsdp option string: "full_shard auto_wrap offload" (or a list).
void set_fsdp(TrainArgs& a, const Field& f) {
  std::vector<std::string> words;
  if (f.node.IsSequence()) {
    for (const auto& e : f.node) words.push_back(e.Scalar());
  } else if (f.node.IsScalar()) {
    std::istringstream in(f.node.Scalar());
    for (std::string w; in >> w;) words.push_back(w);
  }
  a.sharding_per_host = false;
  if (is_off(f.node) || (words.size() == 1 && (words[0] == "false" || words[0] == "False"))) return;
  if (words.size() == 1 && (words[0] == "true" || words[0] == "True")) words = {"full_shard"};
  int64_t stage = -1;
  for (const auto& w : words) {
    if (w == "full_shard") {
      stage = 3;
    } else if (w == "shard_grad_op") {
      stage = 2;
    } else if (w == "no_shard") {
      stage = 0;
    } else if (w == "offload") {
      a.zero_offload = true;
    } else if (w == "auto_wrap") {
      // FSDP's wrapping units: unillm's are the decoder layers whatever is asked
    } else if (w == "hybrid_shard" || w == "hybrid_shard_zero2") {
      // Sharding within a host, replication across hosts: full_shard's or shard_grad_op's stage
      // over each host's processes (Run::go finds how many there are).
      stage = w == "hybrid_shard" ? 3 : 2;
      a.sharding_per_host = true;
    } else {
      bad_value(f, "full_shard, shard_grad_op, no_shard, hybrid_shard, hybrid_shard_zero2, offload or auto_wrap, not '" +
                     w + "'");
    }
  }
  if (stage < 0) bad_value(f, "a sharding strategy: full_shard, shard_grad_op or no_shard");
  a.zero_stage = stage;
  a.zero_from = f.where + " (fsdp: " + show(f.node) + ")";
}

// PaddleNLP's `sharding`: "stage1", "stage2", "stage3", with "offload" (space-separated).
void set_sharding(TrainArgs& a, const Field& f) {
  if (is_off(f.node)) return;
  std::istringstream in(get_string(f));
  int64_t stage = -1;
  for (std::string w; in >> w;) {
    if (w == "stage1" || w == "stage2" || w == "stage3") {
      stage = w[5] - '0';
    } else if (w == "offload") {
      a.zero_offload = true;
    } else {
      bad_value(f, "stage1, stage2 or stage3 (and offload), not '" + w + "'");
    }
  }
  if (stage < 0) bad_value(f, "stage1, stage2 or stage3");
  a.zero_stage = stage;
  a.zero_from = f.where + " (sharding: " + f.node.Scalar() + ")";
}

// accelerate's ParallelismConfig as HF's `parallelism_config`: a map of its sizes (and the
// handlers' settings, which tune torch's tensor/context-parallel plans).
void set_parallelism_config(TrainArgs& a, const Field& f) {
  if (is_off(f.node)) {
    a.parallelism.reset();
    return;
  }
  if (!f.node.IsMap())
    bad_value(f, "a map of dp_replicate_size, dp_shard_size, tp_size and cp_size (accelerate's ParallelismConfig)");
  TrainArgs::ParallelismSizes p;
  p.where = f.where;
  for (const auto& kv : f.node) {
    const std::string k = kv.first.Scalar();
    int64_t* size = k == "dp_replicate_size" ? &p.dp_replicate
                    : k == "dp_shard_size"   ? &p.dp_shard
                    : k == "tp_size"         ? &p.tp
                    : k == "cp_size"         ? &p.cp
                                             : nullptr;
    if (k == "tp_handler" || k == "cp_handler") continue;  // torch's plan settings; the split is unillm's own
    if (!size)
      UNILLM_THROW(ConfigError, "[config] ", f.where, ": parallelism_config: unknown key '", k,
                   "' (dp_replicate_size, dp_shard_size, tp_size, cp_size, tp_handler, cp_handler)");
    const YAML::Node& v = kv.second;
    const nlohmann::json j = yaml_to_json(v);
    if (!j.is_number_integer() || j.get<int64_t>() < 1)
      UNILLM_THROW(ConfigError, "[config] ", f.where, ": parallelism_config.", k, " is '",
                   v.IsScalar() ? v.Scalar() : std::string("a ") + (v.IsMap() ? "map" : "list"),
                   "'; expected a number of processes (1: off)");
    *size = j.get<int64_t>();
  }
  a.parallelism = p;
}

// One DeepSpeed value against the training key it must match ("auto" takes the key's value).
void match(const nlohmann::json& j, const char* ds_key, double want, const char* hf_key, const TrainArgs& a,
           Problems& problems) {
  if (!j.contains(ds_key) || j[ds_key].is_string()) return;  // absent or "auto"
  if (!j[ds_key].is_number() || j[ds_key].get<double>() != want)
    problems.add(UNILLM_MSG("[config] ", a.deepspeed_where, ": '", ds_key, "' is ", j[ds_key].dump(), " but ",
                            hf_key, " is ", want, "; set it to \"auto\" or to the same value (HF refuses the mismatch too)"),
                 true);
}

void check_deepspeed(TrainArgs& a, Problems& problems) {
  const nlohmann::json j = nlohmann::json::parse(a.deepspeed_text);
  match(j, "train_micro_batch_size_per_gpu", static_cast<double>(a.per_device_train_batch_size),
        "per_device_train_batch_size", a, problems);
  match(j, "gradient_accumulation_steps", static_cast<double>(a.gradient_accumulation_steps),
        "gradient_accumulation_steps", a, problems);
  match(j, "gradient_clipping", a.max_grad_norm, "max_grad_norm", a, problems);
  for (const char* prec : {"fp16", "bf16"}) {
    if (!j.contains(prec) || !j[prec].is_object()) continue;
    const nlohmann::json en = j[prec].value("enabled", nlohmann::json("auto"));
    const bool asked = std::string(prec) == "fp16" ? a.fp16 : a.bf16;
    if (en.is_boolean() && en.get<bool>() != asked)
      problems.add(UNILLM_MSG("[config] ", a.deepspeed_where, ": '", prec, ".enabled' is ", en.dump(), " but ", prec,
                              " is ", asked ? "true" : "false", "; set it to \"auto\" or to the same value"),
                   true);
  }
  // DeepSpeed's own optimizer / scheduler sections replace the trainer's; unillm keeps its own.
  for (const char* sec : {"optimizer", "scheduler"})
    if (j.contains(sec))
      problems.add(UNILLM_MSG("[config] ", a.deepspeed_where, ": the '", sec,
                              "' section (DeepSpeed building its own ", sec,
                              ") is not implemented; remove it and set optim / lr_scheduler_type in the config"),
                   false);
  if (j.contains("tensor_parallel") && j["tensor_parallel"].is_object()) {
    const nlohmann::json tp = j["tensor_parallel"].value("autotp_size", nlohmann::json(1));
    if (!tp.is_number() || tp.get<double>() > 1)
      problems.add(UNILLM_MSG("[config] ", a.deepspeed_where, ": tensor_parallel.autotp_size ", tp.dump(),
                              " (DeepSpeed's automatic tensor parallelism) is not implemented yet"),
                   false);
  }
  if (j.contains("amp") && j["amp"].is_object() && j["amp"].value("enabled", false))
    problems.add(UNILLM_MSG("[config] ", a.deepspeed_where, ": 'amp' (NVIDIA apex) is not implemented; use bf16 or fp16"),
                 false);
}

}  // namespace

std::string read_config_text(const Field& f, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    UNILLM_THROW(ConfigError, "[config] ", f.where, ": ", f.key, ": cannot read '", path,
                 "' (a path is taken relative to the directory unillm runs in, as HF does)");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A YAML value as JSON: plain scalars that read as numbers or booleans become those.
nlohmann::json yaml_to_json(const YAML::Node& n) {
  if (n.IsMap()) {
    nlohmann::json j = nlohmann::json::object();
    for (const auto& kv : n) j[kv.first.Scalar()] = yaml_to_json(kv.second);
    return j;
  }
  if (n.IsSequence()) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& e : n) j.push_back(yaml_to_json(e));
    return j;
  }
  if (!n.IsScalar()) return nullptr;
  const std::string& v = n.Scalar();
  if (n.Tag() == "!") return v;  // quoted: a string
  if (v == "true" || v == "True") return true;
  if (v == "false" || v == "False") return false;
  try {
    size_t used = 0;
    const long long i = std::stoll(v, &used);
    if (used == v.size()) return i;
    const double d = std::stod(v, &used);
    if (used == v.size()) return d;
  } catch (const std::exception&) {
  }
  return v;
}

bool set_parallel_field(TrainArgs& a, const Field& f) {
  if (f.key == "deepspeed") {
    set_deepspeed(a, f);
  } else if (f.key == "fsdp") {
    set_fsdp(a, f);
  } else if (f.key == "sharding") {
    set_sharding(a, f);
  } else if (f.key == "sharding_parallel_degree") {
    a.sharding_degree = get_int(f, -1);
    if (a.sharding_degree == 0) bad_value(f, "-1 (every data-parallel process) or a number of processes");
  } else if (f.key == "pipeline_parallel_degree" || f.key == "virtual_pp_degree" ||
             f.key == "tensor_parallel_degree" || f.key == "expert_parallel_degree" ||
             f.key == "context_parallel_degree" || f.key == "sep_parallel_degree") {
    int64_t& d = f.key == "virtual_pp_degree"        ? a.virtual_pp_degree
                 : f.key == "tensor_parallel_degree" ? a.tensor_degree
                 : f.key == "expert_parallel_degree" ? a.expert_degree
                 : f.key == "context_parallel_degree" || f.key == "sep_parallel_degree" ? a.context_degree
                                                     : a.pipeline_degree;
    d = get_int(f, -1);
    if (d == -1 || d == 0) d = 1;  // PaddleNLP's "off"
    if (d < 1) bad_value(f, "a number of processes (1: off)");
  } else if (f.key == "parallelism_config") {
    set_parallelism_config(a, f);
  } else if (f.key == "tp_size") {
    a.hf_tp_size = is_off(f.node) ? 1 : get_int(f, 1);
  } else if (f.key == "sequence_parallel" || f.key == "tensor_parallel_output") {
    (f.key == "sequence_parallel" ? a.sequence_parallel : a.tensor_parallel_output) = !is_off(f.node);
  } else if (f.key == "ddp_bucket_cap_mb") {
    a.ddp_bucket_cap_mb = is_off(f.node) ? 25 : get_number_in(f, 0, 1e9, true, false);  // null: torch's 25
  } else if (f.key == "fsdp_config") {
    // FSDP's settings (wrap policy, prefetch, state dict type) tune how torch shards; unillm's
    // units are the decoder layers. Its offload_params asks for CPU offload.
    if (f.node.IsMap())
      for (const char* k : {"offload_params", "fsdp_offload_params"})
        if (f.node[k] && f.node[k].IsScalar() && (f.node[k].Scalar() == "true" || f.node[k].Scalar() == "True"))
          a.zero_offload = true;
  } else if (f.key == "fsdp_min_num_params" || f.key == "fsdp_transformer_layer_cls_to_wrap") {
    // wrapping policy: unillm's units are the decoder layers
  } else {
    return false;
  }
  return true;
}

void finish_parallel_args(TrainArgs& a, const std::string& where, Problems& problems) {
  if (a.hf_tp_size && *a.hf_tp_size > 1) {
    if (a.tensor_degree > 1 && a.tensor_degree != *a.hf_tp_size)
      problems.add(UNILLM_MSG("[config] ", where, ": tp_size ", *a.hf_tp_size, " and tensor_parallel_degree ",
                              a.tensor_degree, " ask for two tensor-parallel degrees"), true);
    else
      a.tensor_degree = *a.hf_tp_size;
  }
  if (a.parallelism) {
    const auto& p = *a.parallelism;
    if (p.tp > 1) {
      if (a.tensor_degree > 1 && a.tensor_degree != p.tp)
        problems.add(UNILLM_MSG("[config] ", p.where, ": parallelism_config.tp_size ", p.tp, " and tensor degree ",
                                a.tensor_degree, " (tensor_parallel_degree or tp_size) ask for two tensor-parallel degrees"),
                     true);
      else
        a.tensor_degree = p.tp;
    }
    if (p.cp > 1) {
      if (a.context_degree > 1 && a.context_degree != p.cp)
        problems.add(UNILLM_MSG("[config] ", p.where, ": parallelism_config.cp_size ", p.cp,
                                " and context_parallel_degree ", a.context_degree, " ask for two context-parallel degrees"),
                     true);
      else
        a.context_degree = p.cp;
    }
    if (p.dp_shard > 1) {
      if (a.sharding_degree > 1 && a.sharding_degree != p.dp_shard)
        problems.add(UNILLM_MSG("[config] ", p.where, ": parallelism_config.dp_shard_size ", p.dp_shard,
                                " and sharding_parallel_degree ", a.sharding_degree, " ask for two sharding degrees"),
                     true);
      a.sharding_degree = p.dp_shard;
      if (a.zero_stage == 0) {  // accelerate shards with FSDP, whose default is the full shard
        a.zero_stage = 3;
        a.zero_from = UNILLM_MSG(p.where, " (parallelism_config: dp_shard_size ", p.dp_shard, ")");
      }
    }
  }
  if (a.sharding_per_host && a.sharding_degree > 0)
    problems.add(UNILLM_MSG("[config] ", a.zero_from, " shards within each host; sharding degree ", a.sharding_degree,
                            " (sharding_parallel_degree or parallelism_config.dp_shard_size) asks for another"),
                 true);
  if (!a.deepspeed_text.empty()) check_deepspeed(a, problems);
  if (a.zero_stage > 0 && a.use_badam)
    problems.add("[config] " + a.zero_from + ": ZeRO with use_badam (one layer trains at a time) is not implemented", false);
}

}  // namespace unillm::train::detail
