// LoRA configuration checks and PEFT's target-module matching.
#include "nn/lora.h"

#include <algorithm>
#include <cmath>
#include <regex>
#include <set>

namespace unillm::nn {

namespace {

bool is_all(const std::string& t) { return t == "all" || t == "all-linear"; }

std::string last_component(const std::string& name) {
  const size_t dot = name.rfind('.');
  return dot == std::string::npos ? name : name.substr(dot + 1);
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

}  // namespace

double LoraConfig::scaling() const {
  const auto r = static_cast<double>(rank);
  return use_rslora ? alpha / std::sqrt(r) : alpha / r;
}

int64_t pissa_niter(const LoraConfig& c) {
  const std::string& s = c.init_lora_weights;
  if (s == "pissa") return -1;
  const std::string prefix = "pissa_niter_";
  if (s.rfind(prefix, 0) != 0 || s.size() == prefix.size()) return -2;
  int64_t n = 0;
  for (size_t i = prefix.size(); i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9' || n > 1000000) return -2;
    n = n * 10 + (s[i] - '0');
  }
  return n;
}

const std::vector<std::string>& lora_module_names() {
  // gate / shared_expert_gate: a mixture of experts' routers (nn/moe.h), nn.Linear in HF, so
  // PEFT's and LLaMA-Factory's "all" adapt them too.
  static const std::vector<std::string> names = {"q_proj",    "k_proj",  "v_proj",    "o_proj", "gate_proj",
                                                 "up_proj",   "down_proj", "gate",    "shared_expert_gate"};
  return names;
}

void validate_lora_config(const LoraConfig& c) {
  if (c.is_oft) validate_oft_config(c.oft);  // rank/alpha/dropout keep their valid defaults
  if (c.rank <= 0) UNILLM_THROW(ConfigError, "[lora] rank must be positive, got ", c.rank);
  if (!(c.dropout >= 0 && c.dropout < 1))
    UNILLM_THROW(ConfigError, "[lora] dropout must be in [0, 1), got ", c.dropout);
  if (!std::isfinite(c.alpha)) UNILLM_THROW(ConfigError, "[lora] alpha must be finite");
  if (!c.init_lora_weights.empty() && pissa_niter(c) == -2)
    UNILLM_THROW(NotImplemented, "[lora] init_lora_weights '", c.init_lora_weights,
                 "' is not supported (true, pissa or pissa_niter_<n>)");
  if (c.use_dora && pissa_niter(c) != -2)
    UNILLM_THROW(NotImplemented, "[lora] PiSSA with DoRA is not supported");
  if (!c.target_regex.empty()) {
    try {
      std::regex re(c.target_regex);
    } catch (const std::regex_error& e) {
      UNILLM_THROW(ConfigError, "[lora] target_modules regex '", c.target_regex,
                   "' is invalid: ", e.what());
    }
    return;
  }
  if (c.target_modules.empty())
    UNILLM_THROW(ConfigError, "[lora] no target modules; choose from all, ",
                 joined(lora_module_names()));
  const auto& valid = lora_module_names();
  for (const auto& t : c.target_modules) {
    if (is_all(t)) continue;
    if (std::find(valid.begin(), valid.end(), last_component(t)) == valid.end())
      UNILLM_THROW(ConfigError, "[lora] unknown target module '", t, "'; valid: all, ",
                   joined(valid));
  }
}

std::vector<std::string> expanded_targets(const LoraConfig& c) {
  std::vector<std::string> out;
  for (const auto& name : lora_module_names())
    if (std::any_of(c.target_modules.begin(), c.target_modules.end(),
                    [&](const std::string& t) { return is_all(t) || t == name; }))
      out.push_back(name);
  for (const auto& t : c.target_modules)  // dotted suffixes are kept as given
    if (!is_all(t) && t.find('.') != std::string::npos) out.push_back(t);
  return out;
}

std::vector<std::string> expanded_targets(const LoraConfig& c, const std::set<std::string>& present) {
  std::vector<std::string> out;
  for (const auto& t : expanded_targets(c))
    if (t.find('.') != std::string::npos || present.count(t)) out.push_back(t);
  return out;
}

bool lora_targets(const LoraConfig& c, const std::string& module) {
  if (!c.target_regex.empty()) return std::regex_match(module, std::regex(c.target_regex));
  const auto& valid = lora_module_names();
  for (const auto& t : c.target_modules) {
    if (is_all(t)) {
      if (std::find(valid.begin(), valid.end(), last_component(module)) != valid.end()) return true;
      continue;
    }
    if (module == t) return true;
    if (module.size() > t.size() && module.compare(module.size() - t.size(), t.size(), t) == 0 &&
        module[module.size() - t.size() - 1] == '.')
      return true;
  }
  return false;
}

uint64_t mix_seed(uint64_t a, uint64_t b) {
  uint64_t z = a + 0x9E3779B97F4A7C15ull * (b + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t hash_name(const std::string& s) {
  uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a
  for (unsigned char ch : s) h = (h ^ ch) * 0x100000001B3ull;
  return h;
}

}  // namespace unillm::nn
