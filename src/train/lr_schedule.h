// Learning-rate schedules: HF's get_scheduler (LambdaLR multipliers: linear, cosine, constant,
// constant_with_warmup, cosine_with_min_lr, cosine_warmup_with_min_lr, cosine_with_restarts,
// polynomial, inverse_sqrt, reduce_lr_on_plateau, warmup_stable_decay; warm-up starts from 0
// except WSD's and cosine_warmup_with_min_lr's) and PaddleNLP run_pretrain.py's
// Linear/CosineAnnealingWithWarmupDecay (linear_annealing, cosine_annealing).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace unillm::train {

struct ScheduleConfig {
  std::string type = "linear";
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  double min_lr_rate = 0.0;  // cosine_with_min_lr (min_lr / learning_rate when min_lr is given);
                             // warmup_stable_decay's min_lr_ratio
  double num_cycles = 0.5;   // the cosine waves of cosine, cosine_with_min_lr and WSD's cosine decay
  // warmup_stable_decay (transformers' get_wsd_schedule): decay_steps (its num_decay_steps),
  // stable_steps (-1: total − warm-up − decay), and the warm-up / decay curves (linear, cosine,
  // 1-sqrt). Its warm-up starts from min_lr_ratio, not 0.
  int64_t decay_steps = 0, stable_steps = -1;
  std::string warmup_type = "linear", decay_type = "cosine";
  // polynomial: from the base learning rate lr_init down to the absolute lr_end, (1 − progress)^power.
  double lr_init = 1.0, lr_end = 1e-7, power = 1.0;
  // cosine_warmup_with_min_lr's warm-up start (a fraction of the rate; < 0: none given, transformers'
  // (step + 1) / warm-up steps).
  double warmup_lr_rate = -1;
  // reduce_lr_on_plateau (transformers builds torch's ReduceLROnPlateau from lr_scheduler_kwargs,
  // stepped with metric_for_best_model at each evaluation during training): its settings, and the
  // multiplier it has reached (what lr_multiplier returns for it; PlateauState::scale).
  struct Plateau {
    bool max_mode = false, abs_threshold = false;
    double factor = 0.1, threshold = 1e-4, min_lr = 0, eps = 1e-8;
    int64_t patience = 10, cooldown = 0;
  } plateau;
  double plateau_scale = 1.0;

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

// torch's ReduceLROnPlateau state (checkpointed with the trainer state).
struct PlateauState {
  std::optional<double> best;  // none before the first metric (torch's ±inf)
  int64_t bad = 0, cooldown_counter = 0, steps = 0;
  double scale = 1.0;  // the learning rate over learning_rate
};
// One ReduceLROnPlateau step with `metric` for base learning_rate (torch's step(): a better
// metric resets the bad count, cooldown swallows bad counts, more than `patience` bad ones
// multiply the rate by factor, not below min_lr, unless the change is under eps). Returns whether
// the rate changed.
bool plateau_step(const ScheduleConfig::Plateau& p, PlateauState& s, double metric, double learning_rate);

}  // namespace unillm::train
