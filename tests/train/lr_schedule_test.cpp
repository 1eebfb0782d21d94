// Learning-rate schedules against hand-computed values: PaddleNLP run_pretrain.py's
// Linear/CosineAnnealingWithWarmupDecay (with Paddle's LRScheduler off-by-one: 0-based step s uses
// get_lr at last_epoch s + 1) and HF's lambdas through scheduled_lr.
#include "train/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"

namespace unillm::train {
namespace {

ScheduleConfig annealing(const std::string& type, double warmup, double decay, double min_lr) {
  ScheduleConfig c;
  c.type = type;
  c.anneal_warmup = warmup;
  c.anneal_decay = decay;
  c.min_lr = min_lr;
  return c;
}

// max_lr 1, min_lr 0.1, warm-up 2, decay 6. k = s + 1:
// k=1: 1/2; k=2: 2/2; k=3..6: ratio (k-2)/4 = .25, .5, .75, 1; k > 6: min_lr.
TEST(LrSchedule, LinearAnnealingWithWarmupDecay) {
  const auto c = annealing("linear_annealing", 2, 6, 0.1);
  const double want[] = {0.5, 1.0, 0.775, 0.55, 0.325, 0.1, 0.1, 0.1};
  for (int s = 0; s < 8; ++s) EXPECT_NEAR(scheduled_lr(c, 1.0, s), want[s], 1e-12) << "step " << s;
}

// coeff = (cos(pi r) + 1) / 2: r = .25 → 0.853553390593, .5 → .5, .75 → 0.146446609407, 1 → 0.
TEST(LrSchedule, CosineAnnealingWithWarmupDecay) {
  const auto c = annealing("cosine_annealing", 2, 6, 0.1);
  const double want[] = {
      0.5, 1.0, 0.1 + 0.9 * 0.853553390593274, 0.55, 0.1 + 0.9 * 0.146446609406726, 0.1, 0.1};
  for (int s = 0; s < 7; ++s) EXPECT_NEAR(scheduled_lr(c, 1.0, s), want[s], 1e-12) << "step " << s;
}

// run_pretrain.py's warm-up is warmup_ratio * max_steps, a float (0.01 * 150 = 1.5): k=1 is
// 1/1.5 of max_lr; k=2 is past it, r = (2 - 1.5) / (4 - 1.5) = 0.2.
TEST(LrSchedule, FractionalWarmupAndNoWarmup) {
  const auto c = annealing("linear_annealing", 1.5, 4, 0.0);
  EXPECT_NEAR(scheduled_lr(c, 3.0, 0), 2.0, 1e-12);
  EXPECT_NEAR(scheduled_lr(c, 3.0, 1), 3.0 * 0.8, 1e-12);
  // No warm-up: the first step is already one step into the decay (1 - 1/4).
  const auto d = annealing("linear_annealing", 0, 4, 0.0);
  EXPECT_NEAR(scheduled_lr(d, 1.0, 0), 0.75, 1e-12);
  EXPECT_NEAR(scheduled_lr(d, 1.0, 3), 0.0, 1e-12);
  EXPECT_NEAR(scheduled_lr(d, 1.0, 4), 0.0, 1e-12);  // k = 5 > decay: min_lr
}

// llm/config/llama/pretrain_argument.json: 3e-5 → 3e-6, warmup_steps 30, decay = max_steps 10000.
TEST(LrSchedule, OfficialPretrainArguments) {
  const auto c = annealing("linear_annealing", 30, 10000, 3e-6);
  EXPECT_NEAR(scheduled_lr(c, 3e-5, 0), 1e-6, 1e-18);
  EXPECT_NEAR(scheduled_lr(c, 3e-5, 29), 3e-5, 1e-18);
  EXPECT_NEAR(scheduled_lr(c, 3e-5, 30), 3e-6 + (1.0 - 1.0 / 9970) * 2.7e-5, 1e-18);
  EXPECT_NEAR(scheduled_lr(c, 3e-5, 9999), 3e-6, 1e-18);  // k = 10000 = decay: ratio 1
  EXPECT_NEAR(scheduled_lr(c, 3e-5, 10000), 3e-6, 1e-18);
}

// HF types are unchanged: learning_rate × lambda(step), e.g. linear with 2 warm-up of 10 steps.
TEST(LrSchedule, HfTypesThroughScheduledLr) {
  ScheduleConfig c;
  c.type = "linear";
  c.warmup_steps = 2;
  c.total_steps = 10;
  EXPECT_NEAR(scheduled_lr(c, 2.0, 0), 0.0, 1e-12);
  EXPECT_NEAR(scheduled_lr(c, 2.0, 1), 1.0, 1e-12);
  EXPECT_NEAR(scheduled_lr(c, 2.0, 6), 2.0 * 4.0 / 8.0, 1e-12);
  c.type = "cosine_annealing";
  EXPECT_THROW(lr_multiplier(c, 0), ConfigError);  // absolute rates: only through scheduled_lr
  c.type = "polynomial";
  EXPECT_THROW(validate_schedule(c), ConfigError);
}

}  // namespace
}  // namespace unillm::train
