// Preference losses of LLaMA-Factory's CustomDPOTrainer (compute_preference_loss, odds_ratio_loss,
// simpo_loss, bco_loss, get_batch_loss_metrics) and TRL 0.8–0.9's DPOTrainer.dpo_loss, in double, with
// hand-derived gradients; tests/train/pref_loss_test.cpp checks them by central differences and
// tests/reference/pref_loss_parity_test.cpp against torch autograd.
#include "train/stages/pref_loss.h"

#include <cmath>
#include <cstddef>

#include "core/error.h"

namespace unillm::train {
namespace {

// LLaMA-Factory adds the sft (BCO) term only when pref_ftx (pref_bco_weight) > 1e-6.
constexpr double kFtxMin = 1e-6;

constexpr std::pair<const char*, PrefLoss> kNames[] = {
    {"sigmoid", PrefLoss::sigmoid},   {"hinge", PrefLoss::hinge}, {"ipo", PrefLoss::ipo},
    {"kto_pair", PrefLoss::kto_pair}, {"orpo", PrefLoss::orpo},   {"simpo", PrefLoss::simpo}};

double sigmoid(double x) {
  if (x >= 0) return 1.0 / (1.0 + std::exp(-x));
  const double e = std::exp(x);
  return e / (1.0 + e);
}

// log σ(x) = −softplus(−x), without overflow for large |x|.
double log_sigmoid(double x) {
  return x >= 0 ? -std::log1p(std::exp(-x)) : x - std::log1p(std::exp(x));
}

// The log-probs as the loss sees them ([B] each; averaged for ipo/orpo/simpo) and the factor
// d seen / d summed of each row.
struct Seen {
  std::vector<double> pc, pr, rc, rr, scale_c, scale_r;
};

// Per-term losses (B, or 2B for kto_pair) and d(Σ terms)/d seen policy log-prob, [B] each.
struct Terms {
  std::vector<double> losses, dpc, dpr;
};

void check_config(const PrefLossConfig& cfg) {
  const char* name = pref_loss_name(cfg.loss);
  if (!(cfg.beta > 0))
    UNILLM_THROW(ConfigError, "[pref_loss] pref_beta is ", cfg.beta, ", expected > 0");
  if (!(cfg.label_smoothing >= 0 && cfg.label_smoothing <= 0.5))
    UNILLM_THROW(ConfigError, "[pref_loss] dpo_label_smoothing is ", cfg.label_smoothing,
                 ", expected in [0, 0.5]");
  if (cfg.label_smoothing > 0 && cfg.loss != PrefLoss::sigmoid)
    UNILLM_THROW(ConfigError, "[pref_loss] dpo_label_smoothing ", cfg.label_smoothing,
                 " applies only to pref_loss sigmoid, not ", name);
  if (!(cfg.ftx >= 0))
    UNILLM_THROW(ConfigError, "[pref_loss] pref_ftx is ", cfg.ftx, ", expected >= 0");
  if (cfg.ftx > kFtxMin && cfg.loss == PrefLoss::kto_pair)
    UNILLM_THROW(
        ConfigError, "[pref_loss] pref_ftx ", cfg.ftx,
        " cannot be used with pref_loss kto_pair (its 2B losses do not add to B sft terms)");
  if (!(cfg.bco_weight >= 0))
    UNILLM_THROW(ConfigError, "[pref_loss] pref_bco_weight is ", cfg.bco_weight, ", expected >= 0");
  if (pref_loss_uses_bco(cfg) && cfg.loss == PrefLoss::kto_pair)
    UNILLM_THROW(ConfigError, "[pref_loss] pref_bco_weight ", cfg.bco_weight,
                 " cannot be used with pref_loss kto_pair (its 2B losses do not add to B BCO terms)");
  if (pref_loss_uses_bco(cfg) && !pref_loss_uses_reference(cfg.loss))
    UNILLM_THROW(ConfigError, "[pref_loss] pref_bco_weight ", cfg.bco_weight, " needs a reference model; pref_loss ",
                 name, " has none (LLaMA-Factory would ignore the weight)");
}

void check_size(const std::vector<double>& v, size_t b, const char* what) {
  if (v.size() != b)
    UNILLM_THROW(ShapeError, "[pref_loss] ", what, " has ", v.size(), " rows, expected ", b,
                 " (policy_chosen's)");
}

void check_input(const PrefLossConfig& cfg, const PrefLossInput& in) {
  const size_t b = in.policy_chosen.size();
  if (b == 0) UNILLM_THROW(ShapeError, "[pref_loss] empty micro-batch: policy_chosen has 0 rows");
  check_size(in.policy_rejected, b, "policy_rejected");
  check_size(in.chosen_len, b, "chosen_len");
  check_size(in.rejected_len, b, "rejected_len");
  if (pref_loss_uses_reference(cfg.loss)) {
    check_size(in.reference_chosen, b, "reference_chosen");
    check_size(in.reference_rejected, b, "reference_rejected");
  } else if (!in.reference_chosen.empty() || !in.reference_rejected.empty()) {
    UNILLM_THROW(ShapeError, "[pref_loss] reference log-probs given to pref_loss ",
                 pref_loss_name(cfg.loss), ", which uses no reference (expected empty)");
  }
  for (size_t i = 0; i < b; ++i) {
    if (!(in.chosen_len[i] > 0) || !(in.rejected_len[i] > 0))
      UNILLM_THROW(ShapeError, "[pref_loss] pair ", i, " has lengths ", in.chosen_len[i], "/",
                   in.rejected_len[i], " (chosen/rejected), expected > 0 scored tokens");
  }
}

Seen seen_logps(const PrefLossConfig& cfg, const PrefLossInput& in) {
  const size_t b = in.policy_chosen.size();
  const bool avg = pref_loss_averages(cfg.loss), ref = pref_loss_uses_reference(cfg.loss);
  Seen s;
  s.scale_c.assign(b, 1.0);
  s.scale_r.assign(b, 1.0);
  s.pc = in.policy_chosen;
  s.pr = in.policy_rejected;
  s.rc = ref ? in.reference_chosen : std::vector<double>(b, 0.0);
  s.rr = ref ? in.reference_rejected : std::vector<double>(b, 0.0);
  if (!avg) return s;
  for (size_t i = 0; i < b; ++i) {  // all_logps / valid_length, as concatenated_forward
    s.pc[i] /= in.chosen_len[i];
    s.rc[i] /= in.chosen_len[i];
    s.pr[i] /= in.rejected_len[i];
    s.rr[i] /= in.rejected_len[i];
    s.scale_c[i] = 1.0 / in.chosen_len[i];
    s.scale_r[i] = 1.0 / in.rejected_len[i];
  }
  return s;
}

// sigmoid, hinge, ipo: a function of z = (πc − πr) − (ρc − ρr) per pair.
Terms pair_terms(const PrefLossConfig& cfg, const Seen& s) {
  const size_t b = s.pc.size();
  const double beta = cfg.beta, eps = cfg.label_smoothing;
  Terms t{std::vector<double>(b), std::vector<double>(b), std::vector<double>(b)};
  for (size_t i = 0; i < b; ++i) {
    const double z = (s.pc[i] - s.pr[i]) - (s.rc[i] - s.rr[i]);
    double loss = 0, dz = 0;
    if (cfg.loss == PrefLoss::sigmoid) {
      loss = -log_sigmoid(beta * z) * (1 - eps) - log_sigmoid(-beta * z) * eps;
      dz = -(1 - eps) * beta * sigmoid(-beta * z) + eps * beta * sigmoid(beta * z);
    } else if (cfg.loss == PrefLoss::hinge) {
      const double m = 1 - beta * z;
      loss = m > 0 ? m : 0.0;
      dz = m > 0 ? -beta : 0.0;  // torch.relu: gradient 0 at exactly 0
    } else {                     // ipo
      const double d = z - 1 / (2 * beta);
      loss = d * d;
      dz = 2 * d;
    }
    t.losses[i] = loss;
    t.dpc[i] = dz;
    t.dpr[i] = -dz;
  }
  return t;
}

// kto_pair: 2B terms; the batch KL estimates come from the policy and carry gradient (TRL does
// not detach them); clamp(min=0) passes it where the mean is >= 0, as torch's clamp backward.
Terms kto_pair_terms(const PrefLossConfig& cfg, const Seen& s) {
  const size_t b = s.pc.size();
  const double beta = cfg.beta, nb = static_cast<double>(b);
  std::vector<double> a(b), r(b);  // chosen and rejected log-ratios
  double mean_a = 0, mean_r = 0;
  for (size_t i = 0; i < b; ++i) {
    a[i] = s.pc[i] - s.rc[i];
    r[i] = s.pr[i] - s.rr[i];
    mean_a += a[i];
    mean_r += r[i];
  }
  mean_a /= nb;
  mean_r /= nb;
  const double kl_c = mean_a > 0 ? mean_a : 0.0, kl_r = mean_r > 0 ? mean_r : 0.0;
  const double pass_c = mean_a >= 0 ? 1.0 : 0.0, pass_r = mean_r >= 0 ? 1.0 : 0.0;
  Terms t{std::vector<double>(2 * b), std::vector<double>(b), std::vector<double>(b)};
  double sum_ds = 0, sum_dt = 0;  // Σ β σ'(·) of the chosen and of the rejected terms
  for (size_t i = 0; i < b; ++i) {
    const double sc = sigmoid(beta * (a[i] - kl_r)), sr = sigmoid(beta * (kl_c - r[i]));
    t.losses[i] = 1 - sc;
    t.losses[b + i] = 1 - sr;
    const double ds = beta * sc * (1 - sc), dt = beta * sr * (1 - sr);
    t.dpc[i] = -ds;  // through a_i in term i
    t.dpr[i] = dt;   // through r_i in term B + i
    sum_ds += ds;
    sum_dt += dt;
  }
  for (size_t i = 0; i < b; ++i) {
    t.dpc[i] -= sum_dt * pass_c / nb;  // every rejected term through KL_c = mean(a)
    t.dpr[i] += sum_ds * pass_r / nb;  // every chosen term through KL_r = mean(r)
  }
  return t;
}

// orpo (odds_ratio_loss) and simpo (simpo_loss) on the averaged policy log-probs.
Terms reference_free_terms(const PrefLossConfig& cfg, const Seen& s) {
  const size_t b = s.pc.size();
  const double beta = cfg.beta;
  Terms t{std::vector<double>(b), std::vector<double>(b), std::vector<double>(b)};
  for (size_t i = 0; i < b; ++i) {
    const double pc = s.pc[i], pr = s.pr[i];
    if (cfg.loss == PrefLoss::orpo) {
      // log1p(−exp(π)) = log(−expm1(π)), exact near π = 0; d/dπ log_odds = 1 / (−expm1(π)).
      const double nc = -std::expm1(pc), nr = -std::expm1(pr);
      const double log_odds = (pc - pr) - (std::log(nc) - std::log(nr));
      t.losses[i] = -pc + beta * -log_sigmoid(log_odds);
      const double dlo = -beta * sigmoid(-log_odds);
      t.dpc[i] = -1 + dlo / nc;
      t.dpr[i] = -dlo / nr;
    } else {  // simpo
      const double x = beta * ((pc - pr) - cfg.simpo_gamma / beta);
      t.losses[i] = -log_sigmoid(x);
      t.dpc[i] = -beta * sigmoid(-x);
      t.dpr[i] = -t.dpc[i];
    }
  }
  return t;
}

// BCO (LLaMA-Factory's bco_loss, the reward baseline δ detached), mixed into the per-pair terms as
// (t + w·bco) / (1 + w).
void mix_bco(const PrefLossConfig& cfg, const Seen& s, double delta, Terms& t) {
  const double beta = cfg.beta, w = cfg.bco_weight;
  for (size_t i = 0; i < s.pc.size(); ++i) {
    const double xc = beta * (s.pc[i] - s.rc[i]) - delta, xr = beta * (s.pr[i] - s.rr[i]) - delta;
    const double bco = -log_sigmoid(xc) - log_sigmoid(-xr);
    t.losses[i] = (t.losses[i] + w * bco) / (1 + w);
    t.dpc[i] = (t.dpc[i] - w * beta * sigmoid(-xc)) / (1 + w);
    t.dpr[i] = (t.dpr[i] + w * beta * sigmoid(xr)) / (1 + w);
  }
}

double mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return sum / static_cast<double>(v.size());
}

// get_batch_loss_metrics' figures; `losses` are the per-pair losses after the ftx term.
std::vector<std::pair<std::string, double>> metrics_of(const PrefLossConfig& cfg, const Seen& s,
                                                       const std::vector<double>& losses,
                                                       const std::vector<double>& sft) {
  const size_t b = s.pc.size();
  std::vector<double> rc(b), rr(b), acc(b), margin(b);
  for (size_t i = 0; i < b; ++i) {  // β(π − ρ); ρ = 0 for orpo/simpo
    rc[i] = cfg.beta * (s.pc[i] - s.rc[i]);
    rr[i] = cfg.beta * (s.pr[i] - s.rr[i]);
    acc[i] = rc[i] > rr[i] ? 1.0 : 0.0;
    margin[i] = rc[i] - rr[i];
  }
  std::vector<std::pair<std::string, double>> m = {
      {"rewards/chosen", mean(rc)},      {"rewards/rejected", mean(rr)},
      {"rewards/accuracies", mean(acc)}, {"rewards/margins", mean(margin)},
      {"logps/chosen", mean(s.pc)},      {"logps/rejected", mean(s.pr)}};
  if (cfg.loss == PrefLoss::orpo) {
    std::vector<double> odds(b);
    for (size_t i = 0; i < b; ++i) odds[i] = (losses[i] - sft[i]) / cfg.beta;
    m.emplace_back("sft_loss", mean(sft));
    m.emplace_back("odds_ratio_loss", mean(odds));
  }
  return m;
}

}  // namespace

PrefLoss pref_loss_from_name(const std::string& name) {
  for (const auto& [n, loss] : kNames)
    if (name == n) return loss;
  UNILLM_THROW(ConfigError, "[pref_loss] unknown pref_loss '", name,
               "'; expected one of sigmoid, hinge, ipo, kto_pair, orpo, simpo");
}

const char* pref_loss_name(PrefLoss loss) {
  for (const auto& [n, l] : kNames)
    if (l == loss) return n;
  return "?";
}

bool pref_loss_uses_reference(PrefLoss loss) {
  return loss != PrefLoss::orpo && loss != PrefLoss::simpo;
}

bool pref_loss_averages(PrefLoss loss) {
  return loss == PrefLoss::ipo || loss == PrefLoss::orpo || loss == PrefLoss::simpo;
}

bool pref_loss_uses_bco(const PrefLossConfig& cfg) { return cfg.bco_weight > kFtxMin; }

void BcoRunning::update(double x) {
  // TRL's RunningMoments.update for one value: its variance is 0, its count 1.
  const double delta = x - mean, total = count + 1;
  var = (var * count + delta * delta * count / total) / total;
  mean += delta / total;
  count = total;
}

double bco_batch_reward(const PrefLossConfig& cfg, const PrefLossInput& in) {
  check_config(cfg);
  check_input(cfg, in);
  const Seen s = seen_logps(cfg, in);
  double sum = 0;
  for (size_t i = 0; i < s.pc.size(); ++i) sum += cfg.beta * (s.pc[i] - s.rc[i]) + cfg.beta * (s.pr[i] - s.rr[i]);
  return sum / static_cast<double>(2 * s.pc.size());
}

PrefLossOutput pref_loss(const PrefLossConfig& cfg, const PrefLossInput& in) {
  check_config(cfg);
  check_input(cfg, in);
  const size_t b = in.policy_chosen.size();
  const Seen s = seen_logps(cfg, in);
  Terms t = cfg.loss == PrefLoss::kto_pair       ? kto_pair_terms(cfg, s)
            : pref_loss_uses_reference(cfg.loss) ? pair_terms(cfg, s)
                                                 : reference_free_terms(cfg, s);
  if (pref_loss_uses_bco(cfg)) mix_bco(cfg, s, in.bco_delta, t);
  // sft_loss = −(chosen log-prob averaged over its tokens), whatever the loss averages.
  std::vector<double> sft(b);
  for (size_t i = 0; i < b; ++i) sft[i] = -(in.policy_chosen[i] / in.chosen_len[i]);
  const bool ftx = cfg.ftx > kFtxMin;
  if (ftx)
    for (size_t i = 0; i < b; ++i) t.losses[i] += cfg.ftx * sft[i];
  const double n = static_cast<double>(t.losses.size());
  PrefLossOutput out;
  out.loss = mean(t.losses);
  out.d_policy_chosen.resize(b);
  out.d_policy_rejected.resize(b);
  for (size_t i = 0; i < b; ++i) {  // chain rule through the mean and the /len of averaging
    out.d_policy_chosen[i] = t.dpc[i] * s.scale_c[i] / n;
    if (ftx) out.d_policy_chosen[i] -= cfg.ftx / in.chosen_len[i] / n;
    out.d_policy_rejected[i] = t.dpr[i] * s.scale_r[i] / n;
  }
  out.metrics = metrics_of(cfg, s, t.losses, sft);
  return out;
}

}  // namespace unillm::train
