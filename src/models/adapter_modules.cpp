// PEFT modules_to_save on a CausalLM: whole modules (embeddings, lm_head, norms) trained beside a
// LoRA adapter and stored in its adapter_model.safetensors under their base names
// ("base_model.model.model.embed_tokens.weight"). unillm keeps them in the base weights: loading
// an adapter writes them there, so they apply whichever adapters are active.
#include <algorithm>
#include <filesystem>
#include <map>

#include "io/checkpoint.h"
#include "io/json_file.h"
#include "models/adapter.h"
#include "models/resize_vocab.h"

namespace unillm::models {

namespace fs = std::filesystem;

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// "model.norm.weight" -> "model.norm".
std::string module_of(const std::string& param) {
  const size_t dot = param.rfind('.');
  return dot == std::string::npos ? param : param.substr(0, dot);
}

// PEFT's _set_trainable: a module is saved when its name ends with a target (plain string test).
bool targeted(const std::string& param, const std::vector<std::string>& targets) {
  const std::string m = module_of(param);
  for (const auto& t : targets)
    if (ends_with(m, t)) return true;
  return false;
}

bool is_vocab_weight(const std::string& n) {
  return n == "model.embed_tokens.weight" || n == "lm_head.weight";
}

bool base_named(const nn::ParamRef& p, std::string& name) {
  if (!p.adapter.empty() || p.hf_names.size() != 1) return false;
  name = p.hf_names[0];
  return true;
}

void untie_if_targeted(CausalLM& model, const std::vector<std::string>& targets) {
  if (model.config().tie_word_embeddings &&
      (targeted("model.embed_tokens.weight", targets) || targeted("lm_head.weight", targets)))
    untie_embeddings(model);  // PEFT copies embed_tokens and lm_head separately
}

}  // namespace

std::vector<std::pair<std::string, Tensor*>> modules_to_save_params(
    CausalLM& model, const std::vector<std::string>& targets) {
  untie_if_targeted(model, targets);
  std::vector<std::pair<std::string, Tensor*>> out;
  std::vector<bool> used(targets.size(), false);
  for (auto& p : model.module().parameters()) {
    if (!p.adapter.empty()) continue;
    for (size_t i = 0; i < targets.size(); ++i) {
      for (const auto& n : p.hf_names) {
        if (!targeted(n, {targets[i]})) continue;
        if (p.hf_names.size() != 1 || (!is_vocab_weight(n) && n.find("norm") == std::string::npos))
          UNILLM_THROW(
              NotImplemented, "[lora] additional_target / modules_to_save '", targets[i],
              "' names ", n,
              ": only embed_tokens, lm_head and norm modules can be trained in full beside LoRA");
        used[i] = true;
      }
    }
    std::string name;
    if (base_named(p, name) && targeted(name, targets)) out.emplace_back(name, p.tensor);
  }
  for (size_t i = 0; i < targets.size(); ++i)
    if (!used[i])
      UNILLM_THROW(ConfigError, "[lora] additional_target / modules_to_save '", targets[i],
                   "' matches no module of the model (PEFT matches names by their end: "
                   "embed_tokens, lm_head, norm)");
  return out;
}

std::vector<std::string> read_modules_to_save(const std::string& dir) {
  const std::string path = (fs::path(dir) / "adapter_config.json").string();
  const nlohmann::json j = io::read_json_file(path);
  auto it = j.find("modules_to_save");
  if (it == j.end() || it->is_null()) return {};
  if (!it->is_array())
    UNILLM_THROW(ConfigError, "[lora] ", path, ": modules_to_save must be a list of module names");
  std::vector<std::string> out;
  for (const auto& v : *it) {
    if (!v.is_string())
      UNILLM_THROW(ConfigError, "[lora] ", path,
                   ": modules_to_save must be a list of module names");
    out.push_back(v.get<std::string>());
  }
  return out;
}

std::string modules_to_save_key(const std::string& file_key,
                                const std::vector<std::string>& targets) {
  std::string k = file_key;
  const std::string prefix = "base_model.model.";
  if (k.rfind(prefix, 0) == 0) k = k.substr(prefix.size());
  if (k.find(".lora_") != std::string::npos) return "";
  const size_t mts = k.find(".modules_to_save.");  // PEFT's in-memory form, with the adapter name
  if (mts != std::string::npos) {
    const size_t after = k.find('.', mts + 17);
    if (after == std::string::npos) return "";
    k = k.substr(0, mts) + k.substr(after);
  }
  return targeted(k, targets) ? k : "";
}

bool is_modules_to_save_file_key(const std::string& file_key,
                                 const std::vector<std::string>& targets) {
  if (!modules_to_save_key(file_key, targets).empty()) return true;
  // PEFT's save_embedding_layers (a resized vocabulary) adds "X.original_module.weight" and
  // "X.modules_to_save.weight" beside "X.weight"; PEFT's own loader ignores them, so do we.
  std::string k = file_key;
  for (const char* part : {".original_module.", ".modules_to_save."}) {
    const size_t pos = k.find(part);
    if (pos != std::string::npos)
      k = k.substr(0, pos) + "." + k.substr(pos + std::string(part).size());
  }
  return k != file_key && !modules_to_save_key(k, targets).empty();
}

namespace {

// Grows (or shrinks) the vocabulary matrices to `rows` so an adapter's resized embedding fits;
// the file's tensors then overwrite the rows.
void match_vocab_rows(CausalLM& model, int64_t rows) {
  Tensor embed, head;
  for (auto& p : model.module().parameters()) {
    std::string n;
    if (!base_named(p, n)) continue;
    if (n == "model.embed_tokens.weight") embed = *p.tensor;
    if (n == "lm_head.weight") head = *p.tensor;
  }
  if (!embed.defined() || embed.size(0) == rows) return;
  auto resized = [&](const Tensor& w) {
    Tensor out = Tensor::zeros({rows, w.size(1)}, w.dtype(), w.device());
    const int64_t keep = std::min(rows, w.size(0));
    out.slice(0, 0, keep).copy_from(w.slice(0, 0, keep));
    return out;
  };
  model.set_vocab_weights(resized(embed), head.defined() ? resized(head) : Tensor());
}

}  // namespace

void apply_modules_to_save(CausalLM& model, const io::CheckpointReader& ckpt,
                           const std::string& dir, const std::vector<std::string>& targets) {
  std::vector<std::pair<std::string, std::string>> keys;  // (param name, file key)
  for (const auto& k : ckpt.names()) {
    const std::string n = modules_to_save_key(k, targets);
    if (!n.empty()) keys.emplace_back(n, k);
  }
  modules_to_save_params(model, targets);  // checks the targets (and unties, as PEFT copies)
  for (const auto& [n, k] : keys)
    if (is_vocab_weight(n)) match_vocab_rows(model, ckpt.info(k).shape.at(0));
  std::map<std::string, Tensor*> params;
  for (auto& p : model.module().parameters()) {
    std::string n;
    if (base_named(p, n)) params[n] = p.tensor;
  }
  for (const auto& [n, k] : keys) {
    auto it = params.find(n);
    if (it == params.end())
      UNILLM_THROW(IoError, "[lora] ", dir, ": tensor '", k,
                   "' (modules_to_save) names no weight of the model");
    const auto info = ckpt.info(k);
    if (info.shape != it->second->shape())
      UNILLM_THROW(IoError, "[lora] ", dir, ": tensor '", k, "' has shape ", shape_str(info.shape),
                   ", expected ", shape_str(it->second->shape()));
    Tensor dst = it->second->detach();
    dst.copy_from(ckpt.get(k));
  }
}

std::vector<std::pair<std::string, Tensor>> embedding_layer_tensors(CausalLM& model) {
  Tensor embed, head;
  for (auto& p : model.module().parameters()) {
    std::string n;
    if (!base_named(p, n)) continue;
    if (n == "model.embed_tokens.weight") embed = *p.tensor;
    if (n == "lm_head.weight") head = *p.tensor;
  }
  if (!embed.defined()) return {};
  return {{"model.embed_tokens.weight", embed}, {"lm_head.weight", head.defined() ? head : embed}};
}

std::vector<std::string> saved_module_targets(const std::string& dir,
                                              const std::vector<std::string>& file_keys) {
  std::vector<std::string> targets = read_modules_to_save(dir);
  for (const auto& [key, target] :
       {std::pair<std::string, std::string>{"base_model.model.model.embed_tokens.weight",
                                            "embed_tokens"},
        {"base_model.model.lm_head.weight", "lm_head"}})
    if (std::find(file_keys.begin(), file_keys.end(), key) != file_keys.end() &&
        std::find(targets.begin(), targets.end(), target) == targets.end())
      targets.push_back(target);
  return targets;
}

}  // namespace unillm::models
