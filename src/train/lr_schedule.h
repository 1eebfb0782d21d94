// Learning-rate schedules: HF's get_scheduler (LambdaLR multipliers: linear, cosine, constant,
// constant_with_warmup, cosine_with_min_lr; warm-up starts from 0) and PaddleNLP run_pretrain.py's
// Linear/CosineAnnealingWithWarmupDecay (linear_annealing, cosine_annealing).
#pragma once

#include <cstdint>
#include <string>

namespace unillm::train {

struct ScheduleConfig {
  std::string type = "linear";
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  double min_lr_rate = 0.0;  // cosine_with_min_lr (min_lr / learning_rate when min_lr is given)
  // The annealing schedules (PaddleNLP): warm-up and decay lengths in steps, fractional as
  // run_pretrain.py computes them (warmup_ratio * max_steps), and the absolute floor min_lr.
  double anneal_warmup = 0, anneal_decay = 1, min_lr = 0;
};

// The multiplier of the base learning rate after `step` optimizer steps (HF's lr_lambda(step)).
// HF types only.
double lr_multiplier(const ScheduleConfig& c, int64_t step);
// The learning rate of optimizer step `step` (0-based) for base learning_rate: HF types give
// learning_rate * lr_multiplier(c, step). The annealing types follow Paddle's LRScheduler, whose
// constructor already calls step() once, so 0-based step s uses get_lr() at last_epoch k = s + 1:
//   warm-up (anneal_warmup > 0, k <= anneal_warmup): learning_rate * k / anneal_warmup
//   k > anneal_decay: min_lr
//   else min_lr + f * (learning_rate - min_lr), r = (k - warmup) / (decay - warmup),
//        f = 1 - r (linear_annealing) or (cos(pi r) + 1) / 2 (cosine_annealing).
// A pure function of the step, so a resumed run continues the schedule exactly.
double scheduled_lr(const ScheduleConfig& c, double learning_rate, int64_t step);
// Throws ConfigError for an unknown type, listing the known ones.
void validate_schedule(const ScheduleConfig& c);

}  // namespace unillm::train
