// HF scheduler lambdas, written from their definitions in transformers.optimization.
#include "train/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace unillm::train {

void validate_schedule(const ScheduleConfig& c) {
  static const char* known[] = {"linear", "cosine", "constant", "constant_with_warmup", "cosine_with_min_lr"};
  for (auto* k : known)
    if (c.type == k) return;
  UNILLM_THROW(ConfigError, "[config] lr_scheduler_type '", c.type,
               "' is not implemented (linear, cosine, constant, constant_with_warmup, cosine_with_min_lr)");
}

double lr_multiplier(const ScheduleConfig& c, int64_t step) {
  const auto s = static_cast<double>(step), w = static_cast<double>(c.warmup_steps);
  const auto total = static_cast<double>(c.total_steps);
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

}  // namespace unillm::train
