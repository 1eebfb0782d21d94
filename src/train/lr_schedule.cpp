// HF scheduler lambdas, written from their definitions in transformers.optimization, and
// PaddleNLP's annealing schedules, written from paddlenlp.transformers.optimization and
// paddle.optimizer.lr.LRScheduler.
#include "train/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace unillm::train {

namespace {

bool is_annealing(const std::string& type) {
  return type == "linear_annealing" || type == "cosine_annealing";
}

// Paddle's get_lr() at last_epoch k.
double annealing_lr(const ScheduleConfig& c, double max_lr, int64_t k) {
  const auto kd = static_cast<double>(k);
  if (c.anneal_warmup > 0 && kd <= c.anneal_warmup) return max_lr * kd / c.anneal_warmup;
  if (kd > c.anneal_decay) return c.min_lr;
  const double ratio = (kd - c.anneal_warmup) / (c.anneal_decay - c.anneal_warmup);
  const double coeff =
      c.type == "linear_annealing" ? 1.0 - ratio : 0.5 * (std::cos(M_PI * ratio) + 1.0);
  return c.min_lr + coeff * (max_lr - c.min_lr);
}

// transformers' _get_wsd_scheduler_lambda: warm-up from min_lr_ratio, stable at 1, decay to
// min_lr_ratio, then min_lr_ratio.
double wsd_multiplier(const ScheduleConfig& c, int64_t step) {
  const auto s = static_cast<double>(step), w = static_cast<double>(c.warmup_steps);
  const double d = static_cast<double>(c.decay_steps), m = c.min_lr_rate;
  const double st = c.stable_steps >= 0 ? static_cast<double>(c.stable_steps)
                                        : static_cast<double>(c.total_steps) - w - d;
  auto floor_at_min = [m](double f) { return std::max(0.0, f * (1.0 - m) + m); };
  if (s < w) {
    const double p = s / std::max(1.0, w);
    const double f = c.warmup_type == "cosine"   ? 0.5 * (1.0 - std::cos(M_PI * p))
                     : c.warmup_type == "1-sqrt" ? 1.0 - std::sqrt(1.0 - p)
                                                 : p;
    return floor_at_min(f);
  }
  if (s < w + st) return 1.0;
  if (s < w + st + d) {
    const double p = (s - w - st) / std::max(1.0, d);
    const double f = c.decay_type == "linear"   ? 1.0 - p
                     : c.decay_type == "1-sqrt" ? 1.0 - std::sqrt(p)
                                                : 0.5 * (1.0 + std::cos(M_PI * c.num_cycles * 2.0 * p));
    return floor_at_min(f);
  }
  return m;
}

}  // namespace

void validate_schedule(const ScheduleConfig& c) {
  static const char* known[] = {"linear",
                                "cosine",
                                "constant",
                                "constant_with_warmup",
                                "cosine_with_min_lr",
                                "warmup_stable_decay",
                                "cosine_with_restarts",
                                "polynomial",
                                "inverse_sqrt",
                                "reduce_lr_on_plateau",
                                "cosine_warmup_with_min_lr",
                                "linear_annealing",
                                "cosine_annealing"};
  for (auto* k : known)
    if (c.type == k) return;
  UNILLM_THROW(ConfigError, "[config] lr_scheduler_type '", c.type,
               "' is not implemented (linear, cosine, constant, constant_with_warmup, cosine_with_min_lr, "
               "cosine_with_restarts, polynomial, inverse_sqrt, reduce_lr_on_plateau, warmup_stable_decay, "
               "cosine_warmup_with_min_lr)");
}

double lr_multiplier(const ScheduleConfig& c, int64_t step) {
  const auto s = static_cast<double>(step), w = static_cast<double>(c.warmup_steps);
  const auto total = static_cast<double>(c.total_steps);
  if (is_annealing(c.type))
    UNILLM_THROW(ConfigError, "[train] lr_multiplier: '", c.type,
                 "' gives absolute rates; use scheduled_lr");
  if (c.type == "constant") return 1.0;
  if (c.type == "reduce_lr_on_plateau") return c.plateau_scale;  // no warm-up (HF passes none)
  if (c.type == "cosine_warmup_with_min_lr") {  // transformers' ..._with_warmup_lr_rate: one step ahead
    if (step < c.warmup_steps)
      return c.warmup_lr_rate < 0 ? (s + 1.0) / std::max(1.0, w)
                                  : c.warmup_lr_rate + (1.0 - c.warmup_lr_rate) * s / std::max(1.0, w - 1.0);
    const double progress = (s - w + 1.0) / std::max(1.0, total - w);
    const double wave = 0.5 * (1.0 + std::cos(M_PI * c.num_cycles * 2.0 * progress));
    return std::max(0.0, wave * (1.0 - c.min_lr_rate) + c.min_lr_rate);
  }
  if (c.type == "warmup_stable_decay") return wsd_multiplier(c, step);
  if (step < c.warmup_steps) return s / std::max(1.0, w);
  if (c.type == "constant_with_warmup") return 1.0;
  if (c.type == "inverse_sqrt") {
    const double ts = c.warmup_steps > 0 ? w : 10000.0;  // HF's time scale: the warm-up, or 10000
    return 1.0 / std::sqrt((s + ts - w) / ts);
  }
  if (c.type == "polynomial") {
    if (s > total) return c.lr_end / c.lr_init;
    const double remaining = 1.0 - (s - w) / (total - w);  // setup_schedule refuses total == warm-up
    return ((c.lr_init - c.lr_end) * std::pow(remaining, c.power) + c.lr_end) / c.lr_init;
  }
  if (c.type == "linear") return std::max(0.0, (total - s) / std::max(1.0, total - w));
  const double progress = (s - w) / std::max(1.0, total - w);
  if (c.type == "cosine_with_restarts") {  // hard restarts: num_cycles whole waves
    if (progress >= 1.0) return 0.0;
    return std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * std::fmod(c.num_cycles * progress, 1.0))));
  }
  const double wave = 0.5 * (1.0 + std::cos(M_PI * c.num_cycles * 2.0 * progress));
  if (c.type == "cosine") return std::max(0.0, wave);
  if (c.type == "cosine_with_min_lr") return std::max(0.0, wave * (1.0 - c.min_lr_rate) + c.min_lr_rate);
  validate_schedule(c);
  return 1.0;
}

bool plateau_step(const ScheduleConfig::Plateau& p, PlateauState& s, double metric, double learning_rate) {
  ++s.steps;
  bool better = !s.best;
  if (s.best) {
    const double b = *s.best;
    better = p.max_mode ? (p.abs_threshold ? metric > b + p.threshold : metric > b * (1.0 + p.threshold))
                        : (p.abs_threshold ? metric < b - p.threshold : metric < b * (1.0 - p.threshold));
  }
  if (better) {
    s.best = metric;
    s.bad = 0;
  } else {
    ++s.bad;
  }
  if (s.cooldown_counter > 0) {
    --s.cooldown_counter;
    s.bad = 0;
  }
  if (s.bad <= p.patience) return false;
  s.cooldown_counter = p.cooldown;
  s.bad = 0;
  const double old_lr = learning_rate * s.scale, new_lr = std::max(old_lr * p.factor, p.min_lr);
  if (old_lr - new_lr <= p.eps) return false;
  s.scale = new_lr / learning_rate;
  return true;
}

double scheduled_lr(const ScheduleConfig& c, double learning_rate, int64_t step) {
  if (is_annealing(c.type)) return annealing_lr(c, learning_rate, step + 1);
  return learning_rate * lr_multiplier(c, step);
}

}  // namespace unillm::train
