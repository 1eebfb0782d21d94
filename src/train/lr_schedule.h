// Learning-rate schedules as HF's get_scheduler (LambdaLR multipliers): linear, cosine,
// constant, constant_with_warmup, cosine_with_min_lr. Warm-up starts from 0.
#pragma once

#include <cstdint>
#include <string>

namespace unillm::train {

struct ScheduleConfig {
  std::string type = "linear";
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  double min_lr_rate = 0.0;  // cosine_with_min_lr (min_lr / learning_rate when min_lr is given)
};

// The multiplier of the base learning rate after `step` optimizer steps (HF's lr_lambda(step)).
double lr_multiplier(const ScheduleConfig& c, int64_t step);
// Throws ConfigError for an unknown type, listing the known ones.
void validate_schedule(const ScheduleConfig& c);

}  // namespace unillm::train
