// Learning-rate schedules against hand-computed values: PaddleNLP run_pretrain.py's
// Linear/CosineAnnealingWithWarmupDecay (with Paddle's LRScheduler off-by-one: 0-based step s uses
// get_lr at last_epoch s + 1) and HF's lambdas through scheduled_lr.
#include "train/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

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
  c.type = "greedy";  // newer transformers' metric-driven GreedyLR: not a type here
  EXPECT_THROW(validate_schedule(c), ConfigError);
}

// transformers' own schedulers (tools/make_lr_schedule_goldens.py, its get_scheduler over an
// lr-1 optimizer, transformers 4.46 in the reference venv): steps 0..19.
void expect_multipliers(const ScheduleConfig& c, const std::vector<double>& want) {
  for (size_t s = 0; s < want.size(); ++s)
    EXPECT_NEAR(lr_multiplier(c, static_cast<int64_t>(s)), want[s], 1e-12) << c.type << " step " << s;
}

TEST(LrSchedule, CosineCyclesAreTransformers) {
  ScheduleConfig c;
  c.type = "cosine";
  c.warmup_steps = 3;
  c.total_steps = 20;
  c.num_cycles = 1.0;
  expect_multipliers(c, {0, 0.33333333333333331, 0.66666666666666663, 1, 0.96623611470217785, 0.86950445861032954,
                         0.72286917788826921, 0.54613417973165101, 0.36316850496395858, 0.19868268181037185,
                         0.074891432135193003, 0.0085134501580491073, 0.0085134501580491073, 0.074891432135192948,
                         0.19868268181037174, 0.36316850496395847, 0.54613417973165079, 0.72286917788826888,
                         0.86950445861032932, 0.96623611470217785});
  c.num_cycles = 1.5;
  expect_multipliers(c, {0, 0.33333333333333331, 0.66666666666666663, 1, 0.92510856786480711, 0.72286917788826921,
                         0.45386582026834893, 0.19868268181037185, 0.033763885297822094, 0.0085134501580491073,
                         0.13049554138967029, 0.36316850496395847, 0.63683149503604142, 0.86950445861032954,
                         0.99148654984195095, 0.96623611470217785, 0.8013173181896287, 0.54613417973165146,
                         0.27713082211173123, 0.074891432135193059});
  c.num_cycles = 0.5;  // the default
  EXPECT_NEAR(lr_multiplier(c, 10), 0.63683149503604153, 1e-12);
  c.type = "cosine_with_min_lr";
  c.num_cycles = 1.0;
  c.min_lr_rate = 0.1;
  expect_multipliers(c, {0, 0.33333333333333331, 0.66666666666666663, 1, 0.96961250323196002, 0.88255401274929657,
                         0.75058226009944229, 0.59152076175848589, 0.42685165446756279, 0.27881441362933468,
                         0.16740228892167369, 0.1076621051422442, 0.1076621051422442, 0.16740228892167366,
                         0.27881441362933457, 0.42685165446756268, 0.59152076175848578, 0.75058226009944196,
                         0.88255401274929635, 0.96961250323196002});
}

TEST(LrSchedule, WarmupStableDecayIsTransformers) {
  ScheduleConfig c;
  c.type = "warmup_stable_decay";
  c.warmup_steps = 2;
  c.total_steps = 20;
  c.decay_steps = 8;
  c.stable_steps = 5;
  validate_schedule(c);
  expect_multipliers(c, {0, 0.5, 1, 1, 1, 1, 1, 1, 0.96193976625564337, 0.85355339059327373, 0.69134171618254492, 0.5,
                         0.30865828381745514, 0.14644660940672627, 0.038060233744356631, 0, 0, 0, 0, 0});
  c.num_cycles = 1.0;
  expect_multipliers(c, {0, 0.5, 1, 1, 1, 1, 1, 1, 0.85355339059327373, 0.5, 0.14644660940672627, 0,
                         0.14644660940672616, 0.49999999999999989, 0.85355339059327373, 0, 0, 0, 0, 0});
  // Current transformers' additions, from their definitions: the stable phase defaults to the
  // steps left; warm-up and decay curves; both start / end at min_lr_ratio.
  c.num_cycles = 0.5;
  c.stable_steps = -1;  // 20 − 2 − 8 = 10
  c.min_lr_rate = 0.2;
  c.warmup_type = "1-sqrt";
  c.decay_type = "linear";
  EXPECT_NEAR(lr_multiplier(c, 0), 0.2, 1e-15);
  EXPECT_NEAR(lr_multiplier(c, 1), (1 - std::sqrt(0.5)) * 0.8 + 0.2, 1e-15);
  EXPECT_EQ(lr_multiplier(c, 11), 1.0);
  EXPECT_NEAR(lr_multiplier(c, 12), 1.0 * 0.8 + 0.2, 1e-15);
  EXPECT_NEAR(lr_multiplier(c, 14), 0.75 * 0.8 + 0.2, 1e-15);
  EXPECT_NEAR(lr_multiplier(c, 19), 0.125 * 0.8 + 0.2, 1e-15);
  EXPECT_NEAR(lr_multiplier(c, 20), 0.2, 1e-15);
  c.warmup_type = "cosine";
  c.decay_type = "1-sqrt";
  EXPECT_NEAR(lr_multiplier(c, 1), 0.5 * (1 - std::cos(M_PI * 0.5)) * 0.8 + 0.2, 1e-15);
  EXPECT_NEAR(lr_multiplier(c, 14), (1 - std::sqrt(0.25)) * 0.8 + 0.2, 1e-15);
}

TEST(LrSchedule, RestartsPolynomialAndInverseSqrtAreTransformers) {
  ScheduleConfig c;
  c.type = "cosine_with_restarts";
  c.warmup_steps = 3;
  c.total_steps = 20;
  c.num_cycles = 2;
  validate_schedule(c);
  expect_multipliers(c, {0, 0.33333333333333331, 0.66666666666666663, 1, 0.96623611470217785, 0.86950445861032954,
                         0.72286917788826921, 0.54613417973165101, 0.36316850496395858, 0.19868268181037185,
                         0.074891432135193003, 0.0085134501580491073, 0.99148654984195095, 0.925108567864807,
                         0.80131731818962815, 0.63683149503604131, 0.45386582026834915, 0.27713082211173112,
                         0.13049554138967051, 0.033763885297822149});
  c.type = "polynomial";  // lr_init 1, lr_end 0.1, power 2; past the end: lr_end / lr_init
  c.lr_end = 0.1;
  c.power = 2.0;
  expect_multipliers(c, {0, 0.33333333333333331, 0.66666666666666663, 1, 0.89723183391003458, 0.80069204152249129,
                         0.71038062283737025, 0.62629757785467122, 0.54844290657439443, 0.47681660899653977,
                         0.41141868512110735, 0.35224913494809695, 0.29930795847750868, 0.25259515570934254,
                         0.21211072664359859, 0.17785467128027682, 0.14982698961937718, 0.12802768166089967,
                         0.11245674740484431, 0.10311418685121108, 0.10000000000000001, 0.10000000000000001});
  c.type = "inverse_sqrt";
  c.warmup_steps = 4;
  expect_multipliers(c, {0, 0.25, 0.5, 0.75, 1, 0.89442719099991586, 0.81649658092772615, 0.7559289460184544,
                         0.70710678118654746, 0.66666666666666663, 0.63245553203367588, 0.60302268915552726});
  c.warmup_steps = 0;  // time scale 10000
  expect_multipliers(c, {1, 0.99995000374968768, 0.99990001499750059});
}

// cosine_warmup_with_min_lr (current transformers' get_cosine_with_min_lr_schedule_with_warmup_lr_rate,
// from its definition: not in the reference venv's transformers 4.46): warm-up (s + 1) / W, or from
// warmup_lr_rate to 1 over W − 1 steps; then the cosine one step ahead, down to min_lr_rate.
TEST(LrSchedule, CosineWarmupWithMinLrRunsOneStepAhead) {
  ScheduleConfig c;
  c.type = "cosine_warmup_with_min_lr";
  c.warmup_steps = 4;
  c.total_steps = 12;
  c.min_lr_rate = 0.1;
  validate_schedule(c);
  EXPECT_DOUBLE_EQ(lr_multiplier(c, 0), 0.25);
  EXPECT_DOUBLE_EQ(lr_multiplier(c, 3), 1.0);
  EXPECT_NEAR(lr_multiplier(c, 4), (0.5 * (1 + std::cos(M_PI * 1.0 / 8))) * 0.9 + 0.1, 1e-15);
  EXPECT_NEAR(lr_multiplier(c, 11), 0.1, 1e-15);  // progress 1: the floor at the last step
  c.warmup_lr_rate = 0.2;
  EXPECT_DOUBLE_EQ(lr_multiplier(c, 0), 0.2);
  EXPECT_NEAR(lr_multiplier(c, 1), 0.2 + 0.8 / 3, 1e-15);
  EXPECT_NEAR(lr_multiplier(c, 3), 1.0, 1e-15);
}

// torch's ReduceLROnPlateau (what transformers builds for reduce_lr_on_plateau), fed one metric
// sequence: the rate after each step (tools/make_lr_schedule_goldens.py).
TEST(LrSchedule, PlateauStepsAreTorchs) {
  const std::vector<double> metrics = {5.0, 4.0, 4.0, 3.9999, 4.1, 3.0, 3.0, 3.0, 3.0, 2.0, 2.5, 2.5, 2.5, 2.5};
  auto run = [&](const ScheduleConfig::Plateau& p) {
    PlateauState s;
    std::vector<double> lrs;
    for (double m : metrics) {
      plateau_step(p, s, m, 1.0);
      lrs.push_back(s.scale);
    }
    return lrs;
  };
  auto expect = [](const std::vector<double>& got, const std::vector<double>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-15 + 1e-12 * want[i]) << "step " << i;
  };
  ScheduleConfig::Plateau p;
  p.patience = 1;
  p.factor = 0.5;
  expect(run(p), {1, 1, 1, 0.5, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.25, 0.125, 0.125, 0.0625});
  p.patience = 0;
  p.cooldown = 2;
  p.min_lr = 0.1;
  expect(run(p), {1, 1, 0.5, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.25, 0.125, 0.125, 0.125, 0.1});
  ScheduleConfig::Plateau q;
  q.max_mode = true;
  q.patience = 1;
  q.threshold = 0.1;
  q.abs_threshold = true;
  expect(run(q), {1, 1, 0.1, 0.1, 0.01, 0.01, 0.001, 0.001, 1e-4, 1e-4, 1e-5, 1e-5, 1e-6, 1e-6});
  ScheduleConfig c;  // the multiplier is the state's
  c.type = "reduce_lr_on_plateau";
  c.warmup_steps = 5;
  c.plateau_scale = 0.25;
  validate_schedule(c);
  EXPECT_EQ(lr_multiplier(c, 0), 0.25);
}

}  // namespace
}  // namespace unillm::train
