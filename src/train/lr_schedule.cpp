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

}  // namespace

void validate_schedule(const ScheduleConfig& c) {
  static const char* known[] = {"linear",
                                "cosine",
                                "constant",
                                "constant_with_warmup",
                                "cosine_with_min_lr",
                                "linear_annealing",
                                "cosine_annealing"};
  for (auto* k : known)
    if (c.type == k) return;
  UNILLM_THROW(ConfigError, "[config] lr_scheduler_type '", c.type,
               "' is not implemented (linear, cosine, constant, constant_with_warmup, cosine_with_min_lr)");
}

double lr_multiplier(const ScheduleConfig& c, int64_t step) {
  const auto s = static_cast<double>(step), w = static_cast<double>(c.warmup_steps);
  const auto total = static_cast<double>(c.total_steps);
  if (is_annealing(c.type))
    UNILLM_THROW(ConfigError, "[train] lr_multiplier: '", c.type,
                 "' gives absolute rates; use scheduled_lr");
  if (c.type == "constant") return 1.0;
  if (step < c.warmup_steps) return s / std::max(1.0, w);
  if (c.type == "constant_with_warmup") return 1.0;
  if (c.type == "linear") return std::max(0.0, (total - s) / std::max(1.0, total - w));
  const double progress = (s - w) / std::max(1.0, total - w);
  if (c.type == "cosine") return std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * progress)));
  if (c.type == "cosine_with_min_lr") {
    double f = 0.5 * (1.0 + std::cos(M_PI * progress));
    return f * (1.0 - c.min_lr_rate) + c.min_lr_rate;
  }
  validate_schedule(c);
  return 1.0;
}

double scheduled_lr(const ScheduleConfig& c, double learning_rate, int64_t step) {
  if (is_annealing(c.type)) return annealing_lr(c, learning_rate, step + 1);
  return learning_rate * lr_multiplier(c, step);
}

}  // namespace unillm::train
