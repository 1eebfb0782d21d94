// BAdam's layer mode (train/badam.h) against a naive re-statement of the `badam` package's
// BlockOptimizer over torch AdamW: which layer updates at which step in each switch mode, AdamW
// restarting at a switch, decay 0.01 on every tensor of the layer, gradients and the clip norm
// confined to the active layer through requires_grad, and a checkpoint round trip.
#include "train/badam.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <filesystem>

#include "autograd/engine.h"
#include "core/rng.h"
#include "ops/elementwise.h"
#include "support/expect.h"
#include "support/run_cli.h"
#include "train/adamw.h"
#include "train/checkpoint.h"

namespace unillm::train {
namespace {

constexpr int kLayers = 3, kN = 5;

// model.embed_tokens.weight, then per layer a weight and a bias, all [kN], trainable.
class Chain : public nn::Module {
 public:
  explicit Chain(uint64_t seed) {
    testing::init_cpu();
    Rng rng(seed);
    add("model.embed_tokens.weight", rng);
    for (int l = 0; l < kLayers; ++l) {
      add("model.layers." + std::to_string(l) + ".mlp.weight", rng);
      add("model.layers." + std::to_string(l) + ".mlp.bias", rng);
    }
  }
  // h = x · embed; per layer h = h · w + b (elementwise); returns h.
  Tensor forward(const Tensor& x) {
    Tensor h = ops::mul(x, t_[0]);
    for (int l = 0; l < kLayers; ++l) h = ops::add(ops::mul(h, t_[1 + 2 * l]), t_[2 + 2 * l]);
    return h;
  }
  std::deque<Tensor> t_;

 private:
  void add(const std::string& name, Rng& rng) {
    std::vector<float> v(kN);
    for (auto& x : v) x = static_cast<float>(rng.uniform_double() + 0.5);
    t_.push_back(Tensor::from_vector(v, {kN}));
    t_.back().set_requires_grad(true);
    register_parameter(name, &t_.back());
  }
};

OptimizerConfig config(const std::string& mode, int64_t every, int64_t start = -1) {
  OptimizerConfig c;
  c.kind = "badam";
  c.weight_decay = 0.5;  // must not matter: BAdam's groups take torch AdamW's default 0.01
  c.badam.switch_mode = mode;
  c.badam.switch_interval = every;
  c.badam.start_block = start;
  c.badam.seed = 11;
  return c;
}

// The package's schedule, restated: the block of each step 1..steps.
std::vector<int64_t> naive_schedule(const std::string& mode, int64_t every, int64_t start,
                                    int steps) {
  int64_t b = start >= 0 ? start : mode == "descending" ? kLayers - 1 : 0;
  std::vector<int64_t> out;
  for (int k = 1; k <= steps; ++k) {
    out.push_back(b);
    if ((k + 1) % every == 0)
      b = mode == "ascending"    ? (b + 1) % kLayers
          : mode == "descending" ? (b + kLayers - 1) % kLayers
                                 : b;
  }
  return out;
}

TEST(BAdam, LayerPrefixIsTheLastLayersIndex) {
  EXPECT_EQ(layer_prefix("model.layers.12.mlp.up_proj.weight"), "model.layers.12.");
  EXPECT_EQ(layer_prefix("layers.0.attention.wq.weight"), "layers.0.");
  EXPECT_EQ(layer_prefix("model.embed_tokens.weight"), "");
  EXPECT_EQ(layer_prefix("model.norm.weight"), "");
  EXPECT_EQ(layer_prefix("model.layers.x.weight"), "");
  EXPECT_EQ(layer_prefix("model.sublayers.1.weight"), "");
}

TEST(BAdam, SwitchScheduleMatchesBlockOptimizer) {
  for (const auto& [mode, every, start] :
       {std::tuple<std::string, int64_t, int64_t>{"ascending", 3, -1},
        {"descending", 2, -1},
        {"ascending", 1, -1},
        {"descending", 4, 1},
        {"fixed", 2, 2}}) {
    Chain m(1);
    ParamArena arena(m);
    BAdam opt(arena, config(mode, every, start));
    ASSERT_EQ(opt.num_blocks(), kLayers);
    EXPECT_EQ(opt.block_of_segment(0), -1);  // the embedding is in no block
    std::vector<int64_t> got;
    for (int k = 0; k < 12; ++k) {
      got.push_back(opt.active_block());
      opt.step(1e-3);
    }
    EXPECT_EQ(got, naive_schedule(mode, every, start, 12)) << mode << " every " << every;
  }
}

TEST(BAdam, RandomModeUsesEachLayerOncePerRound) {
  Chain m(1);
  ParamArena arena(m);
  BAdam opt(arena, config("random", 1));
  for (int round = 0; round < 4; ++round) {
    std::vector<int64_t> seen;
    for (int k = 0; k < kLayers; ++k) {
      seen.push_back(opt.active_block());
      opt.step(1e-3);
    }
    std::sort(seen.begin(), seen.end());
    EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 2})) << "round " << round;
  }
}

// One full training step as the trainer does it: forward, backward, clip, step.
double train_step(Chain& m, ParamArena& arena, Optimizer& opt, double lr, int k) {
  std::vector<float> xv(kN), gv(kN);
  for (int i = 0; i < kN; ++i)
    xv[i] = 0.3f + 0.1f * static_cast<float>((i + k) % 4), gv[i] = 1.0f - 0.2f * i;
  Tensor h = m.forward(Tensor::from_vector(xv, {kN}));
  autograd::backward(h, Tensor::from_vector(gv, {kN}));
  const double norm = clip_grad_norm(arena, 0.05);
  opt.step(lr);
  arena.zero_grads();
  return norm;
}

// The same run in double: gradients of the active layer only, clipped over them, AdamW with
// decay 0.01 and steps counted from the last switch.
struct Naive {
  std::vector<std::vector<double>> p;  // per tensor (embed, w0, b0, w1, b1, w2, b2)
  std::vector<std::vector<double>> mm, vv;
  int64_t t = 0;
  double step(int64_t active, double lr, int k) {
    std::vector<double> x(kN), go(kN);
    for (int i = 0; i < kN; ++i) x[i] = 0.3 + 0.1 * ((i + k) % 4), go[i] = 1.0 - 0.2 * i;
    std::vector<double> h_in(kN);  // the active layer's input
    for (int i = 0; i < kN; ++i) {
      double h = x[i] * p[0][i];
      for (int l = 0; l < active; ++l) h = h * p[1 + 2 * l][i] + p[2 + 2 * l][i];
      h_in[i] = h;
    }
    std::vector<double> gw(kN), gb(kN);
    for (int i = 0; i < kN; ++i) {
      double d = go[i];  // d out / d (active layer's output): the product of later weights
      for (int l = kLayers - 1; l > active; --l) d *= p[1 + 2 * l][i];
      gw[i] = d * h_in[i], gb[i] = d;
    }
    double ss = 0;
    for (int i = 0; i < kN; ++i) ss += gw[i] * gw[i] + gb[i] * gb[i];
    const double norm = std::sqrt(ss), coef = std::min(1.0, 0.05 / (norm + 1e-6));
    ++t;
    for (int which = 0; which < 2; ++which) {
      auto& w = p[static_cast<size_t>(1 + 2 * active + which)];
      auto& g = which == 0 ? gw : gb;
      for (int i = 0; i < kN; ++i) {
        const double gi = g[i] * coef;
        double& m1 = mm[static_cast<size_t>(which)][i];
        double& v1 = vv[static_cast<size_t>(which)][i];
        w[i] *= 1 - lr * 0.01;
        m1 = 0.9 * m1 + 0.1 * gi;
        v1 = 0.999 * v1 + 0.001 * gi * gi;
        const double mh = m1 / (1 - std::pow(0.9, t)), vh = v1 / (1 - std::pow(0.999, t));
        w[i] -= lr * mh / (std::sqrt(vh) + 1e-8);
      }
    }
    return norm;
  }
  void reset() {
    t = 0;
    mm.assign(2, std::vector<double>(kN, 0.0));
    vv = mm;
  }
};

TEST(BAdam, TrainingMatchesNaiveAndTouchesOnlyTheActiveLayer) {
  Chain m(3);
  ParamArena arena(m);
  BAdam opt(arena, config("ascending", 3));
  std::vector<std::string> said;
  opt.attach({&m}, [&said](const std::string& s) { said.push_back(s); });
  ASSERT_FALSE(said.empty());
  Naive ref;
  for (const auto& seg : arena.segments()) {
    const float* p = arena.params() + seg.offset;
    ref.p.emplace_back(p, p + seg.numel);
  }
  ref.reset();
  const auto schedule = naive_schedule("ascending", 3, -1, 10);
  for (int k = 0; k < 10; ++k) {
    const int64_t active = schedule[static_cast<size_t>(k)];
    // Only the active layer requires grad (and so gets a gradient).
    for (size_t i = 0; i < m.t_.size(); ++i)
      EXPECT_EQ(m.t_[i].requires_grad(), static_cast<int64_t>(i) >= 1 + 2 * active &&
                                             static_cast<int64_t>(i) < 3 + 2 * active)
          << "step " << k + 1 << " tensor " << i;
    const double norm = train_step(m, arena, opt, 0.02, k);
    const double ref_norm = ref.step(active, 0.02, k);
    EXPECT_NEAR(norm, ref_norm, 1e-5 * ref_norm) << "step " << k + 1;
    if ((k + 2) % 3 == 0) ref.reset();  // the switch after step k + 1: AdamW starts afresh
  }
  for (size_t s = 0; s < arena.segments().size(); ++s)
    for (int i = 0; i < kN; ++i)
      EXPECT_NEAR(arena.params()[arena.segments()[s].offset + i], ref.p[s][static_cast<size_t>(i)],
                  2e-6)
          << arena.segments()[s].name << "[" << i << "]";
  // The embedding never moved (BAdam leaves it alone).
  Chain fresh(3);
  EXPECT_EQ(arena.params()[0], fresh.t_[0].data<float>()[0]);
}

TEST(BAdam, FixedModeStillResetsTheStateAtEachInterval) {
  Chain m(1);
  ParamArena arena(m);
  BAdam opt(arena, config("fixed", 2, 1));
  for (int k = 0; k < 3; ++k) {
    for (int64_t i = 0; i < arena.numel(); ++i) arena.grads()[i] = 0.1f;
    opt.step(1e-2);
  }
  // Steps 1 (switch after it: (1+1) % 2 == 0) and 2, 3 (switch after 3): one step since the reset.
  float m_sum = 0;
  for (int64_t i = 0; i < opt.state()[0].second->numel(); ++i)
    m_sum += opt.state()[0].second->data<float>()[i];
  EXPECT_EQ(m_sum, 0.0f);                                   // reset just happened after step 3
  EXPECT_EQ(opt.state()[2].second->data<int64_t>()[1], 0);  // AdamW steps since the switch
  EXPECT_EQ(opt.active_block(), 1);
}

TEST(BAdam, RefusesAModelWithoutLayersAndABadStartBlock) {
  testing::init_cpu();  // before the tensors below: ctest runs this test alone
  class Flat : public nn::Module {
   public:
    Flat() {
      t = Tensor::from_vector({1, 2}, {2});
      t.set_requires_grad(true);
      register_parameter("lm_head.weight", &t);
    }
    Tensor t;
  } flat;
  ParamArena a1(flat);
  EXPECT_THROW(BAdam(a1, config("ascending", 2)), ConfigError);
  Chain m(1);
  ParamArena a2(m);
  try {
    BAdam(a2, config("ascending", 2, 7));
    ADD_FAILURE() << "start block 7 of 3 accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("badam_start_block 7"), std::string::npos) << e.what();
  }
}

// Saving after 4 random-mode steps and loading into a fresh optimiser continues identically.
TEST(BAdam, CheckpointRoundTripContinuesExactly) {
  auto run = [](int first, bool reload, const std::string& dir) {
    Chain m(5);
    ParamArena arena(m);
    auto opt = std::make_unique<BAdam>(arena, config("random", 2));
    opt->attach({&m}, nullptr);
    std::vector<int64_t> blocks;
    for (int k = 0; k < first; ++k)
      blocks.push_back(opt->active_block()), train_step(m, arena, *opt, 0.02, k);
    if (reload) {
      TrainerState st;
      st.global_step = first;
      save_checkpoint(
          dir, [](const std::string&) {}, *opt, st, 0, nullptr, false);
      opt = std::make_unique<BAdam>(arena, config("random", 2));
      load_checkpoint(dir + "/checkpoint-" + std::to_string(first), *opt, arena);
      opt->attach({&m}, nullptr);
    }
    for (int k = first; k < 12; ++k)
      blocks.push_back(opt->active_block()), train_step(m, arena, *opt, 0.02, k);
    std::vector<float> p(arena.params(), arena.params() + arena.numel());
    return std::make_pair(blocks, p);
  };
  const std::string dir = testing::temp_dir("badam_ckpt");
  const auto a = run(5, false, dir), b = run(5, true, dir);
  EXPECT_EQ(a.first, b.first);
  EXPECT_EQ(a.second, b.second);
}

}  // namespace
}  // namespace unillm::train
