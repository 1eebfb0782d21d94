// LoRA adapters on a CausalLM: creation and the per-call active set (CausalLM methods), PEFT
// adapter directories (adapter_config.json + adapter_model.safetensors), merging.
#include "models/adapter.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <nlohmann/json.hpp>

#include "io/checkpoint.h"
#include "io/json_file.h"
#include "io/safetensors_writer.h"
#include "models/adapter_oft.h"

namespace unillm::models {

namespace fs = std::filesystem;

namespace {

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s.empty() ? "(none)" : s;
}

}  // namespace

// ------------------------------------------------------------------ CausalLM adapter methods

void CausalLM::add_lora(const std::string& name, const nn::LoraConfig& config, Rng& rng) {
  if (name.empty() || name.find('.') != std::string::npos)
    UNILLM_THROW(ConfigError, "[lora] adapter name '", name, "' must be non-empty without dots");
  if (adapters_.count(name))
    UNILLM_THROW(ConfigError, "[lora] adapter '", name, "' already exists");
  nn::validate_lora_config(config);
  int modules = 0;
  module().for_each_module("", [&](const std::string& prefix, nn::Module& m) {
    auto* f = dynamic_cast<nn::FusedLinear*>(&m);
    if (f == nullptr) return;
    std::vector<size_t> parts;
    for (size_t i = 0; i < f->parts().size(); ++i)
      if (nn::lora_targets(config, prefix + f->parts()[i].name)) parts.push_back(i);
    if (parts.empty()) return;
    if (config.is_oft) {  // PEFT's OFT (nn/oft.h): zero-initialised rotations, no RNG draw
      f->add_oft(name, config.oft, parts);
      modules += static_cast<int>(parts.size());
      return;
    }
    f->add_lora(name, config, parts, rng, nn::hash_name(prefix + "|" + name));
    // PiSSA: the subspace iteration's seed depends on the module only, so a reload (export,
    // resume, under another adapter name) finds the same residual.
    if (const int64_t niter = nn::pissa_niter(config); niter != -2)
      f->pissa_init(name, niter, nn::hash_name(prefix + "|pissa"));
    modules += static_cast<int>(parts.size());
  });
  if (modules == 0)
    UNILLM_THROW(ConfigError, "[lora] target modules ",
                 config.target_regex.empty() ? joined(config.target_modules) : config.target_regex,
                 " match no module of this model; valid: all, ", joined(nn::lora_module_names()));
  adapters_.emplace(name, config);
}

void CausalLM::set_active_adapters(std::vector<std::string> names) {
  for (const auto& n : names)
    if (!adapters_.count(n))
      UNILLM_THROW(ConfigError, "[lora] no adapter '", n,
                   "'; the model has: ", joined(adapter_names()));
  active_ = std::move(names);
}

std::vector<std::string> CausalLM::adapter_names() const {
  std::vector<std::string> out;
  for (const auto& [n, _] : adapters_) out.push_back(n);
  return out;
}

const nn::LoraConfig& CausalLM::adapter_config(const std::string& name) const {
  auto it = adapters_.find(name);
  if (it == adapters_.end())
    UNILLM_THROW(ConfigError, "[lora] no adapter '", name,
                 "'; the model has: ", joined(adapter_names()));
  return it->second;
}

std::vector<std::pair<std::string, nn::FusedLinear*>> CausalLM::adapter_modules(
    const std::string& name) {
  std::vector<std::pair<std::string, nn::FusedLinear*>> out;
  module().for_each_module("", [&](const std::string& prefix, nn::Module& m) {
    auto* f = dynamic_cast<nn::FusedLinear*>(&m);
    if (f != nullptr && f->lora(name) != nullptr) out.emplace_back(prefix, f);
  });
  return out;
}

void CausalLM::delete_adapter(const std::string& name) {
  adapter_config(name);  // throws when absent
  for (auto& [prefix, f] : adapter_modules(name)) f->remove_lora(name);
  adapters_.erase(name);
  std::erase(active_, name);
}

void CausalLM::merge_adapter(const std::string& name) {
  adapter_config(name);
  for (auto& [prefix, f] : adapter_modules(name)) f->merge_lora(name);
  adapters_.erase(name);
  std::erase(active_, name);
}

std::shared_ptr<const nn::LoraRun> CausalLM::lora_run(
    const std::optional<std::vector<std::string>>& req, Rng* dropout_rng) const {
  const std::vector<std::string>& names = req ? *req : active_;
  if (names.empty()) return nullptr;
  auto run = std::make_shared<nn::LoraRun>();
  bool any_dropout = false;
  for (const auto& n : names) any_dropout |= adapter_config(n).dropout > 0;
  run->active = names;
  if (dropout_rng != nullptr && any_dropout) {
    run->dropout = true;
    run->seed = dropout_rng->next_u64();
  }
  return run;
}

std::shared_ptr<const nn::LoraRun> CausalLM::lora_run(
    const std::vector<ForwardBatch::AdapterRows>& rows) const {
  auto run = std::make_shared<nn::LoraRun>();
  for (const auto& r : rows) {
    (void)adapter_config(r.name);  // ConfigError for an unknown name
    if (r.end <= r.begin) continue;
    run->active.push_back(r.name);
    run->rows.emplace_back(r.begin, r.end);
  }
  if (run->active.empty()) return nullptr;
  return run;
}

// ------------------------------------------------------------------ PEFT directories

std::string peft_key(const std::string& param_name, const std::string& adapter) {
  const std::string tag = "." + adapter + ".weight";
  UNILLM_CHECK(param_name.size() > tag.size() &&
                   param_name.compare(param_name.size() - tag.size(), tag.size(), tag) == 0,
               "[lora] parameter ", param_name, " is not of adapter ", adapter);
  const std::string module = param_name.substr(0, param_name.size() - tag.size());
  // PEFT saves DoRA's magnitude without ".weight" (its state-dict format predates the DoraLayer).
  const std::string mag = ".lora_magnitude_vector";
  if (module.size() > mag.size() && module.compare(module.size() - mag.size(), mag.size(), mag) == 0)
    return "base_model.model." + module;
  return "base_model.model." + module + ".weight";
}

namespace {

// A PEFT file key in our canonical form: no "base_model.model." prefix, no adapter name
// ("x.lora_A.default.weight" -> "x.lora_A.weight").
std::string canonical_key(std::string k) {
  const std::string prefix = "base_model.model.";
  if (k.rfind(prefix, 0) == 0) k = k.substr(prefix.size());
  for (const char* ab : {".lora_A.", ".lora_B.", ".oft_R."}) {
    const size_t pos = k.rfind(ab);
    if (pos == std::string::npos) continue;
    const size_t len = std::char_traits<char>::length(ab);  // 8, or 7 for ".oft_R."
    const std::string rest = k.substr(pos + len);  // "weight" or "<adapter>.weight"
    const size_t dot = rest.find('.');
    if (dot != std::string::npos && rest.substr(dot) == ".weight" &&
        rest.find('.', dot + 1) == std::string::npos)
      k = k.substr(0, pos + len) + "weight";
  }
  // DoRA: "x.lora_magnitude_vector", "...vector.<adapter>" or "...vector.<adapter>.weight".
  const std::string mag = ".lora_magnitude_vector";
  const size_t pos = k.rfind(mag);
  if (pos != std::string::npos) k = k.substr(0, pos + mag.size());
  return k;
}

// An integral value as a JSON integer (PEFT writes r and lora_alpha as ints).
nlohmann::ordered_json number(double v) {
  if (v == static_cast<double>(static_cast<int64_t>(v))) return static_cast<int64_t>(v);
  return v;
}

// The part names adapter `name` is held on (what PEFT's target_modules lists for "all").
std::set<std::string> adapted_parts(CausalLM& model, const std::string& name) {
  std::set<std::string> out;
  for (auto& [prefix, f] : model.adapter_modules(name))
    for (size_t p : f->lora(name)->parts) out.insert(f->parts()[p].name);
  return out;
}

nlohmann::ordered_json config_json(const nn::LoraConfig& c, const AdapterSaveOptions& o,
                                   const std::set<std::string>& present) {
  if (c.is_oft) return oft_config_json(c, o, present);  // adapter_oft.cpp
  // PEFT 0.13's LoraConfig fields, sorted as PEFT writes them (json.dumps(sort_keys=True)).
  nlohmann::ordered_json j;
  j["alpha_pattern"] = nlohmann::ordered_json::object();
  j["auto_mapping"] = nullptr;
  j["base_model_name_or_path"] = o.base_model_name_or_path;
  j["bias"] = "none";
  j["fan_in_fan_out"] = false;
  j["inference_mode"] = true;
  if (c.init_lora_weights.empty())
    j["init_lora_weights"] = true;
  else
    j["init_lora_weights"] = c.init_lora_weights;
  j["layer_replication"] = nullptr;
  j["layers_pattern"] = nullptr;
  j["layers_to_transform"] = nullptr;
  j["loftq_config"] = nlohmann::ordered_json::object();
  j["lora_alpha"] = number(c.alpha);
  j["lora_dropout"] = c.dropout;
  j["megatron_config"] = nullptr;
  j["megatron_core"] = "megatron.core";
  if (o.modules_to_save.empty())
    j["modules_to_save"] = nullptr;
  else
    j["modules_to_save"] = o.modules_to_save;
  j["peft_type"] = "LORA";
  j["r"] = c.rank;
  j["rank_pattern"] = nlohmann::ordered_json::object();
  j["revision"] = nullptr;
  if (c.target_regex.empty())
    j["target_modules"] = nn::expanded_targets(c, present);
  else
    j["target_modules"] = c.target_regex;
  j["task_type"] = "CAUSAL_LM";
  j["use_dora"] = c.use_dora;
  j["use_rslora"] = c.use_rslora;
  return j;
}

}  // namespace

void save_adapter(CausalLM& model, const std::string& name, const std::string& dir,
                  const AdapterSaveOptions& options) {
  const nn::LoraConfig& c = model.adapter_config(name);
  io::NamedTensors tensors;
  for (auto& [pname, t] : model.module().named_adapter_parameters(name))
    tensors.emplace_back(peft_key(pname, name), t.to(DType::f32));
  if (!options.modules_to_save.empty())  // PEFT's key: the module's base name, no adapter name
    for (auto& [pname, t] : modules_to_save_params(model, options.modules_to_save))
      tensors.emplace_back("base_model.model." + pname, t->to(DType::f32));
  for (const auto& [pname, t] : options.token_classification_head)
    tensors.emplace_back("base_model.model." + pname, t.to(DType::f32));
  if (options.save_embedding_layers)
    for (auto& [pname, t] : embedding_layer_tensors(model)) {
      const std::string key = "base_model.model." + pname;
      auto same = [&](const auto& kt) { return kt.first == key; };
      if (std::none_of(tensors.begin(), tensors.end(), same)) tensors.emplace_back(key, t.to(DType::f32));
    }
  nlohmann::ordered_json config = config_json(c, options, adapted_parts(model, name));
  if (!options.token_classification_head.empty()) {  // as PeftModelForTokenClassification saves
    config["task_type"] = "TOKEN_CLS";
    nlohmann::ordered_json& saved = config["modules_to_save"];
    if (saved.is_null()) saved = nlohmann::ordered_json::array();
    for (const char* m : {"classifier", "score"}) saved.push_back(m);
  }
  fs::create_directories(dir);
  io::write_file_atomic((fs::path(dir) / "adapter_config.json").string(), config.dump(2) + "\n");
  io::save_safetensors((fs::path(dir) / "adapter_model.safetensors").string(), tensors,
                       {{"format", "pt"}});
}

void save_pissa_adapter(CausalLM& model, const std::string& name, const std::string& dir,
                        PissaSave what, const AdapterSaveOptions& options) {
  nn::LoraConfig c = model.adapter_config(name);
  const bool converted = what == PissaSave::kConverted;
  io::NamedTensors tensors;
  for (auto& [prefix, f] : model.adapter_modules(name)) {
    const nn::LoraWeights* w = f->lora(name);
    if (!w->init_a.defined())
      UNILLM_THROW(ConfigError, "[lora] adapter '", name, "' is not a PiSSA adapter (pissa_init)");
    const int64_t r = w->rank;
    int64_t b_row = 0;
    for (size_t k = 0; k < w->parts.size(); ++k) {
      const nn::LinearPart& part = f->parts()[w->parts[k]];
      const auto ki = static_cast<int64_t>(k);
      const std::string key = "base_model.model." + prefix + part.name;
      auto rows_of = [&](const Tensor& t, int64_t lo, int64_t hi) {
        return t.slice(0, lo, hi).to(Device{}).to(DType::f32).contiguous();
      };
      const Tensor a0 = rows_of(w->init_a, ki * r, (ki + 1) * r);
      const Tensor b0 = rows_of(w->init_b, b_row, b_row + part.out_features);
      b_row += part.out_features;
      if (!converted) {
        tensors.emplace_back(key + ".lora_A.weight", a0);
        tensors.emplace_back(key + ".lora_B.weight", b0);
        continue;
      }
      // PEFT's subtract_mutated_init: ΔW = s·(B·A − B0·A0) = s·[B | −B0]·[A; A0].
      const Tensor a = rows_of(w->a, ki * r, (ki + 1) * r);
      const Tensor b = rows_of(w->b, b_row - part.out_features, b_row);
      const int64_t in = a.size(1), out = b.size(0);
      Tensor a2 = Tensor::empty({2 * r, in}, DType::f32), b2 = Tensor::empty({out, 2 * r}, DType::f32);
      std::copy_n(a.data<float>(), r * in, a2.data<float>());
      std::copy_n(a0.data<float>(), r * in, a2.data<float>() + r * in);
      for (int64_t i = 0; i < out; ++i)
        for (int64_t q = 0; q < r; ++q) {
          b2.data<float>()[i * 2 * r + q] = b.data<float>()[i * r + q];
          b2.data<float>()[i * 2 * r + r + q] = -b0.data<float>()[i * r + q];
        }
      tensors.emplace_back(key + ".lora_A.weight", a2);
      tensors.emplace_back(key + ".lora_B.weight", b2);
    }
  }
  c.init_lora_weights.clear();  // both are plain LoRA adapters (PEFT writes init_lora_weights true)
  if (converted) {  // rank 2r at the same scaling (PEFT: alpha × 2, × √2 with rslora)
    c.rank *= 2;
    c.alpha *= c.use_rslora ? std::sqrt(2.0) : 2.0;
  }
  AdapterSaveOptions o = options;
  o.modules_to_save.clear();  // PEFT's conversion keeps only the LoRA tensors
  fs::create_directories(dir);
  io::write_file_atomic((fs::path(dir) / "adapter_config.json").string(),
                        config_json(c, o, adapted_parts(model, name)).dump(2) + "\n");
  io::save_safetensors((fs::path(dir) / "adapter_model.safetensors").string(), tensors,
                       {{"format", "pt"}});
}

namespace {

const nlohmann::json* field(const nlohmann::json& j, const char* key) { return peft_field(j, key); }

void refuse_if(bool bad, const std::string& path, const std::string& what) {
  if (bad) UNILLM_THROW(NotImplemented, "[lora] ", path, ": ", what, " is not supported");
}

bool empty_or_null(const nlohmann::json* v) { return v == nullptr || v->empty(); }

nn::LoraConfig parse_config(const nlohmann::json& j, const std::string& path) {
  const nlohmann::json* peft_type = field(j, "peft_type");
  if (peft_type != nullptr && *peft_type == "OFT") return parse_oft_config(j, path);  // adapter_oft.cpp
  if (peft_type == nullptr || *peft_type != "LORA")
    UNILLM_THROW(NotImplemented, "[lora] ", path, ": peft_type ",
                 peft_type ? peft_type->dump() : std::string("missing"),
                 ", only LORA and OFT are supported");
  nn::LoraConfig c;
  c.rank = j.value("r", int64_t{8});
  c.alpha = j.value("lora_alpha", 8.0);
  c.dropout = field(j, "lora_dropout") ? j.at("lora_dropout").get<double>() : 0.0;
  c.use_rslora = field(j, "use_rslora") ? j.at("use_rslora").get<bool>() : false;
  read_target_modules(j, path, "[lora]", c);
  const nlohmann::json* bias = field(j, "bias");
  refuse_if(bias && *bias != "none", path, "bias " + bias->dump());
  c.use_dora = field(j, "use_dora") ? j.at("use_dora").get<bool>() : false;
  // init_lora_weights matters on loading only when it changes the base (PiSSA: PEFT re-runs the
  // decomposition to rebuild the residual); other inits are overwritten by the file's A and B.
  if (const nlohmann::json* init = field(j, "init_lora_weights"); init && init->is_string()) {
    const auto s = init->get<std::string>();
    refuse_if(s == "olora" || s == "loftq" || s == "eva", path, "init_lora_weights " + s);
    if (s.rfind("pissa", 0) == 0) c.init_lora_weights = s;
  }
  refuse_if(field(j, "fan_in_fan_out") && j.at("fan_in_fan_out").get<bool>(), path,
            "fan_in_fan_out");
  refuse_if(!empty_or_null(field(j, "rank_pattern")), path, "rank_pattern");
  refuse_if(!empty_or_null(field(j, "alpha_pattern")), path, "alpha_pattern");
  refuse_if(field(j, "layers_to_transform") != nullptr, path, "layers_to_transform");
  refuse_if(field(j, "layer_replication") != nullptr, path, "layer_replication");
  try {
    nn::validate_lora_config(c);
  } catch (const ConfigError& e) {
    UNILLM_THROW(ConfigError, path, ": ", e.what());
  }
  return c;
}

}  // namespace

nn::LoraConfig read_adapter_config(const std::string& dir) {
  const std::string path = (fs::path(dir) / "adapter_config.json").string();
  if (!fs::exists(path))
    UNILLM_THROW(IoError, "[lora] ", dir,
                 ": no adapter_config.json (not a PEFT adapter directory)");
  try {
    return parse_config(io::read_json_file(path), path);
  } catch (const nlohmann::json::exception& e) {
    UNILLM_THROW(ConfigError, "[lora] ", path, ": ", e.what());
  }
}

namespace {

io::CheckpointReader open_adapter_weights(const std::string& dir) {
  const fs::path st = fs::path(dir) / "adapter_model.safetensors";
  if (fs::exists(st)) return io::CheckpointReader::open(st.string());
  const fs::path bin = fs::path(dir) / "adapter_model.bin";
  if (fs::exists(bin))
    UNILLM_THROW(
        IoError, "[lora] ", dir,
        ": holds a pickled adapter (adapter_model.bin); only "
        "safetensors are loaded (unpickling can run arbitrary code) — convert it with: "
        "python3 -c \"import torch; from safetensors.torch import save_file; sd = torch.load('",
        bin.string(),
        "', map_location='cpu', weights_only=True); save_file({k: "
        "v.contiguous() for k, v in sd.items()}, '",
        st.string(), "', metadata={'format': 'pt'})\"");
  UNILLM_THROW(IoError, "[lora] ", dir, ": no adapter_model.safetensors");
}

void copy_weights(CausalLM& model, const io::CheckpointReader& ckpt, const std::string& dir,
                  const std::string& name, const std::vector<std::string>& modules_to_save) {
  std::map<std::string, std::string> file_keys;  // canonical -> key in the file
  for (const auto& k : ckpt.names()) {
    if (is_modules_to_save_file_key(k, modules_to_save)) continue;  // apply_modules_to_save's
    const std::string ck = canonical_key(k);
    if (!file_keys.emplace(ck, k).second)
      UNILLM_THROW(IoError, "[lora] ", dir, ": tensors '", file_keys[ck], "' and '", k,
                   "' name the same weight (several adapters in one file?)");
  }
  for (auto& [pname, view] : model.module().named_adapter_parameters(name)) {
    const std::string ck = canonical_key(peft_key(pname, name));
    auto it = file_keys.find(ck);
    if (it == file_keys.end())
      UNILLM_THROW(IoError, "[lora] ", dir, ": tensor 'base_model.model.", ck,
                   "' missing from adapter_model.safetensors (adapter_config.json targets it)");
    const auto info = ckpt.info(it->second);
    if (info.shape != view.shape())
      UNILLM_THROW(IoError, "[lora] ", dir, ": tensor '", it->second, "' has shape ",
                   shape_str(info.shape), ", expected ", shape_str(view.shape()),
                   " (rank and module sizes from adapter_config.json and the model)");
    if (!is_floating(info.dtype))
      UNILLM_THROW(IoError, "[lora] ", dir, ": tensor '", it->second, "' has dtype ",
                   dtype_name(info.dtype));
    Tensor dst = view.detach();
    dst.copy_from(ckpt.get(it->second));
    file_keys.erase(it);
  }
  if (!file_keys.empty())
    UNILLM_THROW(IoError, "[lora] ", dir, ": tensor '", file_keys.begin()->second,
                 "' is not a LoRA weight of a module adapter_config.json targets in this model");
}

}  // namespace

nn::LoraConfig load_adapter(CausalLM& model, const std::string& dir, const std::string& name) {
  nn::LoraConfig c = read_adapter_config(dir);
  io::CheckpointReader ckpt = open_adapter_weights(dir);
  Rng unused(0);  // A is overwritten from the file
  std::vector<std::string> saved_modules = saved_module_targets(dir, ckpt.names());
  // A token classifier's adapter (TOKEN_CLS, LLaMA-Factory v1's reward model): its classifier
  // modules are the score head, which the reward-model stage reads (models::ValueHead kScore); the
  // others are the model's.
  std::vector<std::string> skipped = saved_modules;
  if (is_token_classification_adapter(dir))
    std::erase_if(saved_modules, [](const std::string& m) { return m == "classifier" || m == "score"; });
  model.add_lora(name, c, unused);
  try {
    copy_weights(model, ckpt, dir, name, skipped);
    if (!saved_modules.empty()) apply_modules_to_save(model, ckpt, dir, saved_modules);
  } catch (...) {
    model.delete_adapter(name);
    throw;
  }
  return c;
}

void merge_adapter(CausalLM& model, const std::string& name) { model.merge_adapter(name); }

bool is_token_classification_adapter(const std::string& dir) {
  const fs::path path = fs::path(dir) / "adapter_config.json";
  if (!fs::exists(path)) return false;
  const nlohmann::json j = io::read_json_file(path.string());
  const auto it = j.find("task_type");
  return it != j.end() && it->is_string() && it->get<std::string>() == "TOKEN_CLS";
}

}  // namespace unillm::models
