// Freeze tuning: LLaMA-Factory's name rules, resolved onto fused tensors.
#include "models/freeze.h"

#include <algorithm>
#include <cctype>
#include <set>

namespace unillm::models {

namespace {

std::string joined(const std::set<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// Python's name.split(sep)[-1].
std::string after_last(const std::string& name, const std::string& sep) {
  const size_t pos = name.rfind(sep);
  return pos == std::string::npos ? name : name.substr(pos + sep.size());
}

// re.search(r"\.\d+\.", name) is not None
bool has_layer_index(const std::string& name) {
  for (size_t i = 0; i < name.size(); ++i) {
    if (name[i] != '.') continue;
    size_t j = i + 1;
    while (j < name.size() && std::isdigit(static_cast<unsigned char>(name[j]))) ++j;
    if (j > i + 1 && j < name.size() && name[j] == '.') return true;
  }
  return false;
}

}  // namespace

std::vector<int64_t> llama_pro_layers(int64_t num_layers, int64_t trainable_layers) {
  if (trainable_layers <= 0 || num_layers % trainable_layers != 0)
    UNILLM_THROW(ConfigError, "[freeze] use_llama_pro: `num_layers` ", num_layers,
                 " should be divisible by `num_layer_trainable` ", trainable_layers,
                 " (freeze_trainable_layers: the number of expanded layers)");
  std::vector<int64_t> layers;
  const int64_t stride = num_layers / trainable_layers;
  for (int64_t i = stride - 1; i < num_layers; i += stride) layers.push_back(i);
  return layers;
}

std::vector<std::string> freeze_patterns(const std::vector<std::string>& hf_names,
                                         int64_t num_layers, const FreezeConfig& c) {
  if (num_layers <= 0) UNILLM_THROW(ConfigError, "[freeze] the model has no layers");
  std::vector<int64_t> layers;
  if (c.llama_pro) {  // LLaMA-Factory's _setup_freeze_tuning with use_llama_pro
    layers = llama_pro_layers(num_layers, c.trainable_layers);
  } else if (c.trainable_layers > 0)
    for (int64_t i = std::max<int64_t>(0, num_layers - c.trainable_layers); i < num_layers; ++i)
      layers.push_back(i);
  else
    for (int64_t i = 0; i < std::min(-c.trainable_layers, num_layers); ++i) layers.push_back(i);
  std::set<std::string> hidden, non_hidden;
  for (const auto& name : hf_names) {
    if (name.find(".0.") != std::string::npos) {
      const std::string rest = after_last(name, ".0.");
      hidden.insert(rest.substr(0, rest.find('.')));
    } else if (name.find(".1.") != std::string::npos) {  // LLaMA-Factory: MoD starts at layer 1
      const std::string rest = after_last(name, ".1.");
      hidden.insert(rest.substr(0, rest.find('.')));
    }
    if (!has_layer_index(name)) {
      const size_t last = name.rfind('.');
      if (last != std::string::npos) {
        const size_t prev = name.rfind('.', last - 1);
        non_hidden.insert(name.substr(prev == std::string::npos ? 0 : prev + 1,
                                      last - (prev == std::string::npos ? 0 : prev + 1)));
      }
    }
  }
  std::vector<std::string> patterns;
  for (const auto& m : c.trainable_modules) {
    if (m != "all" && !hidden.count(m))
      UNILLM_THROW(ConfigError, "[freeze] freeze_trainable_modules: module '", m,
                   "' not found; choose from all, ", joined(hidden));
    for (int64_t i : layers)
      patterns.push_back("." + std::to_string(i) + "." + (m == "all" ? "" : m));
  }
  for (const auto& m : c.extra_modules) {
    if (!non_hidden.count(m))
      UNILLM_THROW(ConfigError, "[freeze] freeze_extra_modules: module '", m,
                   "' not found; choose from ", joined(non_hidden));
    patterns.push_back(m);
  }
  return patterns;
}

bool freeze_selects(const std::vector<std::string>& patterns, const std::string& hf_name) {
  return std::any_of(patterns.begin(), patterns.end(),
                     [&](const std::string& p) { return hf_name.find(p) != std::string::npos; });
}

std::vector<FreezeDecision> freeze_decisions(CausalLM& model, const FreezeConfig& c,
                                             std::vector<std::string>* patterns) {
  std::vector<std::string> names;
  for (const auto& [n, _] : model.named_parameters()) names.push_back(n);
  const std::vector<std::string> selected = freeze_patterns(names, model.config().num_layers, c);
  std::vector<FreezeDecision> decisions;
  for (auto& ref : model.module().parameters()) {
    if (!ref.adapter.empty()) continue;
    std::vector<std::string> on, off;
    for (const auto& n : ref.hf_names) (freeze_selects(selected, n) ? on : off).push_back(n);
    if (!on.empty() && !off.empty())
      UNILLM_THROW(ConfigError, "[freeze] the rules select ", on.front(), " but not ", off.front(),
                   ", which share one fused tensor here; train or freeze them together");
    decisions.push_back({ref, !on.empty()});
  }
  if (patterns) *patterns = selected;
  return decisions;
}

FreezeResult apply_freeze(CausalLM& model, const FreezeConfig& c) {
  FreezeResult res;
  const std::vector<FreezeDecision> decisions = freeze_decisions(model, c, &res.patterns);
  for (const auto& [ref, trainable] : decisions) {
    Tensor& t = *ref.tensor;
    res.total_elements += t.numel();
    if (!trainable) {
      t.set_requires_grad(false);
      continue;
    }
    if (c.upcast_trainable && t.dtype() != DType::f32 && t.dtype() != DType::f64)
      t = t.to(DType::f32);
    t.set_requires_grad(true);
    res.trainable.push_back(ref.hf_names.at(0));
    res.trainable_elements += t.numel();
  }
  return res;
}

}  // namespace unillm::models
