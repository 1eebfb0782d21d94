// GaLore's and APOLLO's target rule and the full-rank AdamW step they share (low_rank.h).
#include "train/low_rank.h"

#include <algorithm>
#include <cmath>
#include <regex>

namespace unillm::train {

bool is_low_rank_target(const std::string& hf_name, const std::vector<std::string>& targets) {
  const std::string suffix = ".weight";
  if (hf_name.size() <= suffix.size() ||
      hf_name.compare(hf_name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return false;  // biases are 1-D; LLaMA-Factory takes params with len(shape) > 1
  const std::string module = hf_name.substr(0, hf_name.size() - suffix.size());
  if (module.find("embed_tokens") != std::string::npos) return false;  // nn.Embedding
  if (targets.size() == 1 && targets[0] == "all") {
    // find_all_linear_modules: every linear's last name component, lm_head forbidden.
    const size_t dot = module.rfind('.');
    const std::string last = dot == std::string::npos ? module : module.substr(dot + 1);
    return module.find("lm_head") == std::string::npos && last != "lm_head";
  }
  for (const auto& t : targets)
    if (module.find(t) != std::string::npos) return true;
  return false;
}

bool is_low_rank_target(const std::string& hf_name, const LowRankSettings& s) {
  if (!s.hf_targets) return is_low_rank_target(hf_name, s.target);
  const std::string suffix = ".weight";
  if (hf_name.size() <= suffix.size() || hf_name.compare(hf_name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return false;
  const std::string module = hf_name.substr(0, hf_name.size() - suffix.size());
  if (module.find("embed_tokens") != std::string::npos) return false;  // nn.Embedding, not nn.Linear
  auto full = [&](const std::string& pattern) { return std::regex_match(module, std::regex(pattern)); };
  if (s.hf_target_is_string) {
    std::string t = s.target.at(0);
    std::replace(t.begin(), t.end(), '_', '-');
    return t == "all-linear" || full(s.target[0]);
  }
  for (const auto& t : s.target)
    if (module == t || module.find(t) != std::string::npos) return true;
  for (const auto& t : s.target)
    if (full(t)) return true;
  return false;
}

void adam_full_rank_step(float* p, const float* g, float* m, float* v, int64_t n,
                         const AdamScalars& s) {
  const float one_b1 = 1.0f - s.beta1, one_b2 = 1.0f - s.beta2;
#pragma omp parallel for schedule(static) if (n > (1 << 15))
  for (int64_t i = 0; i < n; ++i) {
    m[i] = m[i] * s.beta1 + one_b1 * g[i];
    v[i] = v[i] * s.beta2 + one_b2 * g[i] * g[i];
    p[i] -= s.step_size * (m[i] / (std::sqrt(v[i]) + s.eps));
    if (s.decay != 0) p[i] -= s.decay * p[i];
  }
}

}  // namespace unillm::train
