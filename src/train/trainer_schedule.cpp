// The learning-rate schedule of a run: HF's types and their lr_scheduler_kwargs, PaddleNLP
// run_pretrain.py's annealing, and the logging / evaluation / saving intervals (lr_schedule.h).
#include <cmath>

#include "core/error.h"
#include "train/trainer_run.h"

namespace unillm::train::detail {

void Run::setup_schedule() {
  // A step takes gradient_accumulation_steps micro-batches on each of the dp processes.
  const int64_t per_epoch = std::max<int64_t>(loader_->batches_per_epoch() / (a_.gradient_accumulation_steps * dp_size()), 1);
  total_steps_ = a_.max_steps > 0 ? a_.max_steps
                                  : static_cast<int64_t>(std::ceil(a_.num_train_epochs * static_cast<double>(per_epoch)));
  sched_.type = a_.lr_scheduler_type;
  sched_.total_steps = total_steps_;
  sched_.warmup_steps = a_.num_warmup_steps(total_steps_);
  if (a_.lr_scheduler_kwargs.min_lr) sched_.min_lr_rate = *a_.lr_scheduler_kwargs.min_lr / a_.learning_rate;
  if (a_.lr_scheduler_kwargs.min_lr_rate) sched_.min_lr_rate = *a_.lr_scheduler_kwargs.min_lr_rate;
  const LrSchedulerKwargs& k = a_.lr_scheduler_kwargs;
  sched_.num_cycles = k.num_cycles.value_or(sched_.type == "cosine_with_restarts" ? 1.0 : 0.5);  // HF's defaults
  sched_.lr_init = a_.learning_rate;
  sched_.lr_end = k.lr_end.value_or(1e-7);
  sched_.warmup_lr_rate = k.warmup_lr_rate.value_or(-1.0);
  sched_.power = k.power.value_or(1.0);
  ScheduleConfig::Plateau& p = sched_.plateau;  // torch's defaults unless given
  p.max_mode = k.mode.value_or("min") == "max";
  p.abs_threshold = k.threshold_mode.value_or("rel") == "abs";
  p.factor = k.factor.value_or(0.1);
  p.threshold = k.threshold.value_or(1e-4);
  p.eps = k.eps.value_or(1e-8);
  p.min_lr = sched_.type == "reduce_lr_on_plateau" ? k.min_lr.value_or(0.0) : 0.0;
  p.patience = k.patience.value_or(10);
  p.cooldown = k.cooldown.value_or(0);
  if (sched_.type == "reduce_lr_on_plateau" && sched_.warmup_steps > 0)
    say("reduce_lr_on_plateau has no warm-up (transformers builds torch's ReduceLROnPlateau without one); "
        "the warm-up steps are ignored");
  if (sched_.type == "polynomial" && sched_.total_steps <= sched_.warmup_steps)  // HF divides by zero
    UNILLM_THROW(ConfigError, "[train] ", a_.config_path, ": lr_scheduler_type polynomial needs more steps (",
                 total_steps_, ") than warm-up steps (", sched_.warmup_steps, ")");
  if (k.min_lr_ratio) sched_.min_lr_rate = *k.min_lr_ratio;  // warmup_stable_decay
  if (k.num_decay_steps) sched_.decay_steps = *k.num_decay_steps;
  if (k.num_stable_steps) sched_.stable_steps = *k.num_stable_steps;
  if (k.warmup_type) sched_.warmup_type = *k.warmup_type;
  if (k.decay_type) sched_.decay_type = *k.decay_type;
  if (sched_.type == "warmup_stable_decay" && !k.num_stable_steps &&
      sched_.warmup_steps + sched_.decay_steps > total_steps_)  // transformers would run a negative stable phase
    UNILLM_THROW(ConfigError, "[train] ", a_.config_path, ": warmup_stable_decay: ", sched_.warmup_steps,
                 " warm-up and ", sched_.decay_steps, " decay steps exceed the run's ", total_steps_, " steps");
  if (a_.pretrain_annealing) setup_annealing();
  validate_schedule(sched_);
  log_every_ = a_.logging_strategy == "no" ? 0 : resolve_interval(a_.logging_steps, total_steps_);
  save_by_epoch_ = a_.save_strategy == "epoch";
  save_every_ = a_.save_strategy == "steps" ? resolve_interval(a_.save_steps, total_steps_) : 0;
  eval_enabled_ = a_.do_eval && eval_.num_rows() > 0;
  eval_by_epoch_ = a_.eval_strategy == "epoch";
  eval_every_ = eval_enabled_ && !eval_by_epoch_
                    ? resolve_interval(a_.eval_steps.value_or(a_.logging_steps), total_steps_)
                    : 0;
}

// run_pretrain.py: warm-up over warmup_steps when > 0, else warmup_ratio × max_steps (not
// rounded); decay until decay_steps (default max_steps). Here max_steps is the run's total steps
// (run_pretrain.py needs max_steps; a fraction warmup_steps is a ratio of it, as in HF v5).
void Run::setup_annealing() {
  const auto total = static_cast<double>(total_steps_);
  sched_.type = a_.lr_scheduler_type + "_annealing";
  sched_.anneal_warmup = a_.warmup_steps >= 1  ? a_.warmup_steps
                         : a_.warmup_steps > 0 ? a_.warmup_steps * total
                                               : a_.warmup_ratio * total;
  sched_.anneal_decay = a_.decay_steps.value_or(total);
  sched_.min_lr = a_.min_learning_rate;
  say(UNILLM_MSG("lr schedule: PaddleNLP run_pretrain ",
                 a_.lr_scheduler_type == "linear" ? "Linear" : "Cosine",
                 "AnnealingWithWarmupDecay (max_lr ", a_.learning_rate, ", min_lr ", sched_.min_lr,
                 ", warm-up ", sched_.anneal_warmup, ", decay ", sched_.anneal_decay, " steps)"));
}

}  // namespace unillm::train::detail
