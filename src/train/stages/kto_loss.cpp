// KTO loss of LLaMA-Factory's CustomKTOTrainer (get_batch_loss_metrics, log) over TRL 0.8's
// KTOTrainer.kto_loss, in double, with hand-derived gradients; tests/train/kto_loss_test.cpp
// checks them by central differences and tests/reference/kto_loss_parity_test.cpp against torch
// autograd.
#include "train/stages/kto_loss.h"

#include <cmath>
#include <cstddef>

#include "core/error.h"

namespace unillm::train {
namespace {

// LLaMA-Factory adds the sft term only when pref_ftx > 1e-6.
constexpr double kFtxMin = 1e-6;

double sigmoid(double x) {
  if (x >= 0) return 1.0 / (1.0 + std::exp(-x));
  const double e = std::exp(x);
  return e / (1.0 + e);
}

void check_config(const KtoLossConfig& cfg) {
  if (!(cfg.beta > 0) || !std::isfinite(cfg.beta))
    UNILLM_THROW(ConfigError, "[kto_loss] pref_beta is ", cfg.beta, ", expected > 0");
  if (!(cfg.desirable_weight >= 0) || !std::isfinite(cfg.desirable_weight))
    UNILLM_THROW(ConfigError, "[kto_loss] kto_chosen_weight is ", cfg.desirable_weight,
                 ", expected >= 0");
  if (!(cfg.undesirable_weight >= 0) || !std::isfinite(cfg.undesirable_weight))
    UNILLM_THROW(ConfigError, "[kto_loss] kto_rejected_weight is ", cfg.undesirable_weight,
                 ", expected >= 0");
  if (!(cfg.ftx >= 0) || !std::isfinite(cfg.ftx))
    UNILLM_THROW(ConfigError, "[kto_loss] pref_ftx is ", cfg.ftx, ", expected >= 0");
}

template <typename T>
void check_size(const std::vector<T>& v, size_t b, const char* what) {
  if (v.size() != b)
    UNILLM_THROW(ShapeError, "[kto_loss] ", what, " has ", v.size(), " rows, expected ", b,
                 " (policy's)");
}

void check_input(const KtoLossInput& in) {
  const size_t b = in.policy.size();
  if (b == 0) UNILLM_THROW(ShapeError, "[kto_loss] empty micro-batch: policy has 0 rows");
  check_size(in.reference, b, "reference");
  check_size(in.policy_kl, b, "policy_kl");
  check_size(in.reference_kl, b, "reference_kl");
  check_size(in.length, b, "length");
  check_size(in.desirable, b, "desirable");
  for (size_t i = 0; i < b; ++i)
    if (!(in.length[i] > 0))
      UNILLM_THROW(ShapeError, "[kto_loss] example ", i, " has length ", in.length[i],
                   ", expected > 0 scored tokens");
}

// kl = (policy_KL_logps − reference_KL_logps).mean().detach(), gathered (one process), clamped.
double kl_estimate(const KtoLossInput& in) {
  double sum = 0;
  for (size_t i = 0; i < in.policy_kl.size(); ++i) sum += in.policy_kl[i] - in.reference_kl[i];
  const double mean = sum / static_cast<double>(in.policy_kl.size());
  return mean > 0 ? mean : 0.0;
}

}  // namespace

KtoLossOutput kto_loss(const KtoLossConfig& cfg, const KtoLossInput& in) {
  check_config(cfg);
  check_input(in);
  const size_t b = in.policy.size();
  const double nb = static_cast<double>(b), beta = cfg.beta;
  KtoLossOutput out;
  out.kl = kl_estimate(in);
  out.d_policy.assign(b, 0.0);
  double loss_sum = 0, sft_sum = 0, n_c = 0;
  double reward_c = 0, reward_r = 0, logp_c = 0, logp_r = 0;
  for (size_t i = 0; i < b; ++i) {
    const double ratio = in.policy[i] - in.reference[i];  // π − ρ
    if (in.desirable[i]) {  // w_d·(1 − σ(β(ratio − KL))); 1 − σ(x) = σ(−x)
      const double x = beta * (ratio - out.kl);
      loss_sum += cfg.desirable_weight * sigmoid(-x);
      out.d_policy[i] = -cfg.desirable_weight * beta * sigmoid(x) * sigmoid(-x) / nb;
      sft_sum += -in.policy[i] / in.length[i];
      reward_c += beta * ratio;
      logp_c += in.policy[i];
      n_c += 1;
    } else {  // w_u·(1 − σ(β(KL − ratio)))
      const double y = beta * (out.kl - ratio);
      loss_sum += cfg.undesirable_weight * sigmoid(-y);
      out.d_policy[i] = cfg.undesirable_weight * beta * sigmoid(y) * sigmoid(-y) / nb;
      reward_r += beta * ratio;
      logp_r += in.policy[i];
    }
  }
  out.loss = loss_sum / nb;
  if (cfg.ftx > kFtxMin && n_c > 0) {
    // ftx · sft_loss.nanmean() / len(policy_chosen_logps) · len(batch["labels"])
    const double scale = cfg.ftx * nb / (n_c * n_c);
    out.loss += scale * sft_sum;
    for (size_t i = 0; i < b; ++i)
      if (in.desirable[i]) out.d_policy[i] -= scale / in.length[i];
  }
  const double n_r = nb - n_c;
  if (n_c > 0) out.metrics.push_back({"rewards/chosen", reward_c, n_c});
  if (n_c > 0) out.metrics.push_back({"logps/chosen", logp_c, n_c});
  if (n_r > 0) out.metrics.push_back({"rewards/rejected", reward_r, n_r});
  if (n_r > 0) out.metrics.push_back({"logps/rejected", logp_r, n_r});
  return out;
}

std::vector<std::pair<std::string, double>> kto_log_metrics(
    const std::vector<KtoRatioMetric>& summed, double kl_sum) {
  auto find = [&](const std::string& key) -> const KtoRatioMetric* {
    for (const KtoRatioMetric& m : summed)
      if (m.key == key) return &m;
    return nullptr;
  };
  std::vector<std::pair<std::string, double>> logs;
  bool have[2] = {false, false};
  const char* splits[2] = {"chosen", "rejected"};
  for (int s = 0; s < 2; ++s)
    for (const char* kind : {"rewards", "logps", "logits"}) {
      const std::string key = std::string(kind) + "/" + splits[s];
      const KtoRatioMetric* m = find(key);
      if (!m || !(m->count > 0)) continue;
      logs.emplace_back(key, m->sum / m->count);
      if (std::string(kind) == "rewards") have[s] = true;
    }
  if (have[0] && have[1]) {
    double chosen = 0, rejected = 0;
    for (const auto& [k, v] : logs) {
      if (k == "rewards/chosen") chosen = v;
      if (k == "rewards/rejected") rejected = v;
    }
    logs.emplace_back("rewards/margins", chosen - rejected);
  }
  logs.emplace_back("kl", kl_sum);
  return logs;
}

}  // namespace unillm::train
