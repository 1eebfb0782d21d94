// The optimisers of train/optimizer.h, one step each against a naive re-statement of the
// reference algorithm (torch.optim.SGD, transformers' Adafactor, bitsandbytes' 8-bit AdamW), the
// arena's HF-named parts, LoRA+'s groups, and checkpoint round trips of each optimiser's state.
#include "train/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <tuple>

#include "core/rng.h"
#include "ops/quant_4bit.h"
#include "support/expect.h"
#include "support/run_cli.h"
#include "train/adafactor.h"
#include "train/adamw.h"
#include "train/adamw_8bit.h"
#include "train/checkpoint.h"
#include "train/sgd.h"
#include "train/zero.h"

namespace unillm::train {
namespace {

// An optimizer config of `kind` with Adam's default betas and eps and the given weight decay.
OptimizerConfig config_of(const std::string& kind, double weight_decay) {
  OptimizerConfig c;
  c.kind = kind;
  c.weight_decay = weight_decay;
  return c;
}

// A module with a fused [6, 40] matrix (HF parts a: 2 rows, b: 4 rows), a plain [80, 64] matrix
// and a 1-D bias, all trainable.
class Toy : public nn::Module {
 public:
  explicit Toy(uint64_t seed) {
    testing::init_cpu();
    Rng rng(seed);
    auto fill = [&rng](Tensor& t, const Shape& s) {
      std::vector<float> v(static_cast<size_t>(s[0] * (s.size() > 1 ? s[1] : 1)));
      for (auto& x : v) x = static_cast<float>(rng.uniform_double() - 0.5);
      t = Tensor::from_vector(v, s);
      t.set_requires_grad(true);
    };
    fill(fused, {6, 40});
    fill(big, {80, 64});
    fill(bias, {7});
    register_fused_parameter("fused.weight", &fused, {{"x.a.weight", 0, 2}, {"x.b.weight", 2, 6}});
    register_parameter("big.lora_B.default.weight", &big);
    register_parameter("big.bias", &bias);
  }
  Tensor fused, big, bias;
};

void random_grads(ParamArena& arena, uint64_t seed) {
  Rng rng(seed);
  for (int64_t i = 0; i < arena.numel(); ++i)
    arena.grads()[i] = static_cast<float>(rng.uniform_double() - 0.5) * 0.1f;
}

TEST(Optimizer, ArenaKeepsShapesAndHfParts) {
  Toy m(1);
  ParamArena arena(m);
  ASSERT_EQ(arena.segments().size(), 3u);
  EXPECT_EQ(arena.segments()[0].shape, (std::vector<int64_t>{6, 40}));
  EXPECT_EQ(arena.segments()[0].part_rows, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(arena.segments()[2].part_rows, (std::vector<int64_t>{7}));
  auto parts = arena_parts(arena);
  ASSERT_EQ(parts.size(), 4u);
  EXPECT_EQ(parts[1].offset, 80);
  EXPECT_EQ(parts[1].rows, 4);
  EXPECT_TRUE(parts[2].matrix);
  EXPECT_FALSE(parts[3].matrix);
  EXPECT_FALSE(arena.segments()[2].decay);  // a bias
}

// ZeRO's cut (train/zero.h): ranges across parameters, and AdamW stepped range by range — each
// over ParamArena::range, with its own state — gives the weights of one AdamW over the arena,
// decay and LoRA+'s lr_scale per segment kept where a range cuts a segment.
TEST(Optimizer, ZeroRangesStepAsTheWholeArena) {
  EXPECT_EQ(zero_range(10, 3, 0), (std::pair<int64_t, int64_t>{0, 4}));
  EXPECT_EQ(zero_range(10, 3, 2), (std::pair<int64_t, int64_t>{8, 10}));
  EXPECT_EQ(zero_range(2, 4, 3), (std::pair<int64_t, int64_t>{2, 2}));  // more ranks than elements
  EXPECT_TRUE(zero_shardable("adamw"));
  EXPECT_FALSE(zero_shardable("adafactor"));
  Toy whole_m(5), cut_m(5);
  ParamArena whole(whole_m), cut(cut_m);
  apply_loraplus(whole, 16.0, 1e-6, 1e-3);
  apply_loraplus(cut, 16.0, 1e-6, 1e-3);
  const int64_t n = whole.numel();
  ASSERT_EQ(n, 6 * 40 + 80 * 64 + 7);
  // 3 ranges: the first cuts the fused matrix' end off, the last holds the big matrix' tail and
  // the bias.
  const ParamArena first = cut.range(0, 200), middle = cut.range(200, 5000), last = cut.range(5000, n);
  ASSERT_EQ(first.segments().size(), 1u);
  EXPECT_EQ(first.segments()[0].numel, 200);
  EXPECT_EQ(first.segments()[0].shape, (std::vector<int64_t>{200}));  // cut: 1-D
  ASSERT_EQ(middle.segments().size(), 2u);
  EXPECT_EQ(middle.segments()[1].offset, 40);  // rebased: 240 - 200
  EXPECT_EQ(middle.segments()[1].lr_scale, 16.0);  // lora_B's group
  ASSERT_EQ(last.segments().size(), 2u);
  EXPECT_FALSE(last.segments()[1].decay);  // the bias
  EXPECT_EQ(last.param_tensor().numel(), n - 5000);
  const AdamWConfig c{0.9, 0.999, 1e-8, 0.1};
  AdamW one(whole, c);
  std::vector<ParamArena> ranges = {first, middle, last};
  std::vector<std::unique_ptr<AdamW>> parts;
  for (auto& r : ranges) parts.push_back(std::make_unique<AdamW>(r, c));
  for (int step = 0; step < 3; ++step) {
    random_grads(whole, 10 + step);
    random_grads(cut, 10 + step);
    one.step(1e-3);
    for (auto& p : parts) p->step(1e-3);
  }
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(whole.params()[i], cut.params()[i]) << i;
}

// A rank's runs within a window of the arena (ZeRO's state written a window at a time): cut at
// both ends, `at` moved with each start, runs outside dropped.
TEST(Optimizer, ClipRunsKeepsThePartsInAWindow) {
  const std::vector<ArenaRun> runs = {{0, 10, 0}, {20, 30, 10}, {40, 45, 20}};
  const auto c = clip_runs(runs, 5, 42);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(std::make_tuple(c[0].lo, c[0].hi, c[0].at), std::make_tuple(5, 10, 5));
  EXPECT_EQ(std::make_tuple(c[1].lo, c[1].hi, c[1].at), std::make_tuple(20, 30, 10));
  EXPECT_EQ(std::make_tuple(c[2].lo, c[2].hi, c[2].at), std::make_tuple(40, 42, 20));
  EXPECT_TRUE(clip_runs(runs, 10, 20).empty());
  const auto inner = clip_runs(runs, 22, 24);
  ASSERT_EQ(inner.size(), 1u);
  EXPECT_EQ(std::make_tuple(inner[0].lo, inner[0].hi, inner[0].at), std::make_tuple(22, 24, 12));
}

// ZeRO-3's shard (train/param_shards.h): several arena ranges copied into an arena of its own,
// each placed where the runs say, segments clipped and rebased as range() clips them; padding
// elements are zero and in no segment; the copy does not alias the arena.
TEST(Optimizer, CopyRunsPlacesRangesInAnArenaOfItsOwn) {
  Toy m(7);
  ParamArena arena(m);
  apply_loraplus(arena, 16.0, 1e-6, 1e-3);
  const int64_t n = arena.numel();
  // The fused matrix' last 40 elements, then (after 2 padding elements) the bias.
  const ParamArena s = arena.copy_runs({{200, 240, 0}, {n - 7, n, 42}}, 52);
  ASSERT_EQ(s.numel(), 52);
  for (int64_t i = 0; i < 40; ++i) ASSERT_EQ(s.param_tensor().item_flat(i), arena.params()[200 + i]) << i;
  EXPECT_EQ(s.param_tensor().item_flat(40), 0.0);
  EXPECT_EQ(s.param_tensor().item_flat(41), 0.0);
  for (int64_t i = 0; i < 7; ++i) ASSERT_EQ(s.param_tensor().item_flat(42 + i), arena.params()[n - 7 + i]) << i;
  ASSERT_EQ(s.segments().size(), 2u);
  EXPECT_EQ(s.segments()[0].offset, 0);
  EXPECT_EQ(s.segments()[0].numel, 40);
  EXPECT_EQ(s.segments()[0].shape, (std::vector<int64_t>{40}));  // cut: 1-D
  EXPECT_EQ(s.segments()[1].offset, 42);
  EXPECT_EQ(s.segments()[1].shape, (std::vector<int64_t>{7}));  // whole: its own shape
  EXPECT_FALSE(s.segments()[1].decay);
  EXPECT_NE(s.param_tensor().storage(), arena.param_tensor().storage());
  EXPECT_EQ(s.grad_tensor().to_float_vector(), std::vector<float>(52, 0.0f));
  // Released, the arena keeps its layout and zero_grads() does nothing.
  arena.release_storage();
  EXPECT_EQ(arena.numel(), n);
  EXPECT_FALSE(arena.param_tensor().storage()->holds_memory());
  arena.zero_grads();
}

// LLaMA-Factory v1's torch.optim.AdamW(model.parameters()): one group, so the bias decays too
// (HF's groups leave it out). With zero gradients AdamW's step is the decay alone.
TEST(Optimizer, DecayEverySegmentDecaysBiasesToo) {
  for (bool all : {false, true}) {
    Toy m(7);
    ParamArena arena(m);
    if (all) decay_every_segment(arena);
    const auto& last = arena.segments().back();  // the bias
    const std::vector<float> before(arena.params() + last.offset, arena.params() + last.offset + last.numel);
    AdamWConfig c;
    c.weight_decay = 0.5;
    AdamW opt(arena, c);
    arena.zero_grads();
    opt.step(0.1);
    for (int64_t i = 0; i < last.numel; ++i)
      EXPECT_FLOAT_EQ(arena.params()[last.offset + i], all ? before[i] * 0.95f : before[i]) << all << " " << i;
  }
}

TEST(Optimizer, KindsFromHfNames) {
  EXPECT_EQ(optimizer_kind("adamw_torch_fused"), "adamw");
  EXPECT_EQ(optimizer_kind("paged_adamw_8bit"), "adamw_8bit");
  EXPECT_EQ(optimizer_kind("adamw_bnb_8bit"), "adamw_8bit");
  EXPECT_EQ(optimizer_kind("adafactor"), "adafactor");
  EXPECT_EQ(optimizer_kind("lion_8bit"), "");
}

TEST(Optimizer, SgdStepIsPlainSgdWithGroupDecay) {
  Toy m(2);
  ParamArena arena(m);
  random_grads(arena, 3);
  std::vector<float> p0(arena.params(), arena.params() + arena.numel());
  auto opt = make_optimizer(arena, config_of("sgd", 0.1));
  opt->step(0.05);
  EXPECT_EQ(opt->steps(), 1);
  for (const auto& seg : arena.segments())
    for (int64_t i = seg.offset; i < seg.offset + seg.numel; ++i) {
      const double wd = seg.decay ? 0.1 : 0.0;
      const double want = p0[i] - 0.05 * (arena.grads()[i] + wd * p0[i]);
      EXPECT_NEAR(arena.params()[i], want, 1e-6) << seg.name << " " << i;
    }
}

// Adafactor's first step from zero state, per HF tensor, in double.
std::vector<double> naive_adafactor(const std::vector<float>& p0, const float* g,
                                    const ParamArena& arena, double lr, double wd) {
  std::vector<double> out(p0.begin(), p0.end());
  const double beta2t = 1.0 - std::pow(1.0, -0.8);  // 0 at step 1: the state is the new statistic
  for (const ArenaPart& part : arena_parts(arena)) {
    const int64_t R = part.rows, C = part.cols, n = R * C;
    std::vector<double> u(static_cast<size_t>(n));
    auto sq = [&](int64_t i) {
      return static_cast<double>(g[part.offset + i]) * g[part.offset + i] + 1e-30;
    };
    if (part.matrix) {
      std::vector<double> row(R, 0), col(C, 0);
      for (int64_t i = 0; i < R; ++i)
        for (int64_t j = 0; j < C; ++j) row[i] += sq(i * C + j) / C, col[j] += sq(i * C + j) / R;
      double mean = 0;
      for (double r : row) mean += r / R;
      for (int64_t i = 0; i < R; ++i)
        for (int64_t j = 0; j < C; ++j)
          u[i * C + j] = (1 - beta2t) * 0 +
                         g[part.offset + i * C + j] / std::sqrt(row[i] / mean) / std::sqrt(col[j]);
    } else {
      for (int64_t i = 0; i < n; ++i) u[i] = g[part.offset + i] / std::sqrt(sq(i));
    }
    double ss = 0;
    for (double x : u) ss += x * x;
    const double denom = std::max(std::sqrt(ss / n), 1.0);
    const double w = part.seg->decay ? wd : 0.0;
    for (int64_t i = 0; i < n; ++i) {
      double& p = out[part.offset + i];
      p = p - w * lr * p - u[i] / denom * lr;
    }
  }
  return out;
}

TEST(Optimizer, AdafactorStepFactorsEachHfTensor) {
  Toy m(4);
  ParamArena arena(m);
  random_grads(arena, 5);
  std::vector<float> p0(arena.params(), arena.params() + arena.numel());
  const std::vector<double> want = naive_adafactor(p0, arena.grads(), arena, 0.01, 0.1);
  auto opt = make_optimizer(arena, config_of("adafactor", 0.1));
  opt->step(0.01);
  for (int64_t i = 0; i < arena.numel(); ++i)
    EXPECT_NEAR(arena.params()[i], want[i], 1e-6 * std::max(1.0, std::fabs(want[i]))) << i;
  // State: rows 2 + 4 + 80, cols 40 + 40 + 64, the bias's 7.
  auto st = opt->state();
  ASSERT_EQ(st.size(), 3u);
  EXPECT_EQ(st[0].second->numel(), 86);
  EXPECT_EQ(st[1].second->numel(), 144);
  EXPECT_EQ(st[2].second->numel(), 7);
}

TEST(Optimizer, DynamicMapsAreBnbs) {
  const auto& s = bnb_dynamic_map(true);
  const auto& u = bnb_dynamic_map(false);
  for (int i = 0; i < 256; ++i) EXPECT_EQ(s[i], ops::dynamic_map()[i]) << i;  // the QLoRA one
  EXPECT_EQ(u[0], 0.0f);
  EXPECT_EQ(u[255], 1.0f);
  for (int i = 1; i < 256; ++i) EXPECT_LT(u[i - 1], u[i]) << i;
  EXPECT_EQ(nearest_code(u, 0.0f), 0);
  EXPECT_EQ(nearest_code(s, -1.0f), 0);
  for (float x : {0.3f, 1e-5f, 0.77f, 0.999f}) {  // the nearest value, by a full scan
    int best = 0;
    for (int c = 1; c < 256; ++c)
      if (std::fabs(x - u[c]) < std::fabs(x - u[best])) best = c;
    EXPECT_EQ(nearest_code(u, x), best) << x;
  }
}

int naive_nearest(const std::array<float, 256>& map, float x) {
  int best = 0;
  for (int c = 1; c < 256; ++c)
    if (std::fabs(x - map[c]) < std::fabs(x - map[best])) best = c;
  return best;
}

TEST(Optimizer, AdamW8bitStepQuantisesBlocksOfLargeTensors) {
  Toy m(6);  // big: 5120 elements (8-bit, 20 blocks); fused parts and bias: 32-bit
  ParamArena arena(m);
  random_grads(arena, 7);
  std::vector<float> p0(arena.params(), arena.params() + arena.numel());
  AdamW8bit opt(arena, {0.9, 0.999, 1e-8, 0.1});
  const float lr = 0.01f;
  opt.step(lr);
  const std::vector<float> m1 = opt.dequantized_exp_avg(), v1 = opt.dequantized_exp_avg_sq();
  // bnb's f32 scalars: (1 − β) in f32, corrections at step 1.
  const float b1 = 1.0f - 0.9f, b2 = 1.0f - 0.999f, c2 = std::sqrt(b2), c1 = b1;
  for (const ArenaPart& part : arena_parts(arena)) {
    const bool q8 = part.numel() >= AdamW8bit::kMin8bitSize;
    for (int64_t b = 0; b * 256 < part.numel(); ++b) {
      const int64_t i0 = part.offset + b * 256, i1 = std::min(i0 + 256, part.offset + part.numel());
      float max1 = 0, max2 = 0;
      for (int64_t i = i0; i < i1; ++i) {
        const float g = arena.grads()[i];
        max1 = std::max(max1, std::fabs(b1 * g));
        max2 = std::max(max2, b2 * g * g);
      }
      for (int64_t i = i0; i < i1; ++i) {
        const float g = arena.grads()[i], m = b1 * g, v = b2 * g * g;
        const float wd = part.seg->decay ? 0.1f : 0.0f;
        const float want_p =
            (p0[i] - lr * c2 / c1 * (m / (std::sqrt(v) + c2 * 1e-8f))) * (1.0f - lr * wd);
        EXPECT_NEAR(arena.params()[i], want_p, 1e-6f) << i;
        if (q8) {
          EXPECT_EQ(m1[i],
                    bnb_dynamic_map(true)[naive_nearest(bnb_dynamic_map(true), m / max1)] * max1)
              << i;
          EXPECT_EQ(v1[i],
                    bnb_dynamic_map(false)[naive_nearest(bnb_dynamic_map(false), v / max2)] * max2)
              << i;
        } else {
          EXPECT_FLOAT_EQ(m1[i], m);
          EXPECT_FLOAT_EQ(v1[i], v);
        }
      }
    }
  }
  // 8-bit: 2 bytes per element of big plus 2 × 20 absmaxes; f32 moments for the other 247.
  EXPECT_EQ(opt.state_bytes(), 2 * 5120 + 2 * 20 * 4 + 2 * 247 * 4);
}

TEST(Optimizer, LoraPlusGroups) {
  Toy m(8);
  ParamArena arena(m);
  arena.mutable_segments()[0].name = "x.lora_A.default.weight";
  arena.mutable_segments()[0].decay = false;
  apply_loraplus(arena, 16.0, 1e-6, 1e-4);
  EXPECT_EQ(arena.segments()[0].lr_scale, 1.0);  // lora_A: lr, always with decay
  EXPECT_TRUE(arena.segments()[0].decay);
  EXPECT_EQ(arena.segments()[1].lr_scale, 16.0);  // lora_B
  EXPECT_EQ(arena.segments()[2].lr_scale, 16.0);  // 1-D
  EXPECT_FALSE(arena.segments()[2].decay);
  // Every optimiser honours the factor: one SGD step moves lora_B 16× as far.
  random_grads(arena, 9);
  std::vector<float> p0(arena.params(), arena.params() + arena.numel());
  Sgd sgd(arena, 0.0);
  sgd.step(1e-3);
  const int64_t a = arena.segments()[0].offset, b = arena.segments()[1].offset;
  EXPECT_NEAR(p0[a] - arena.params()[a], 1e-3 * arena.grads()[a], 1e-7);  // f32 rounding of p
  EXPECT_NEAR(p0[b] - arena.params()[b], 16e-3 * arena.grads()[b], 1e-7);
}

TEST(Optimizer, CheckpointRoundTripsEachKindsState) {
  const std::string dir = testing::temp_dir("optim_ckpt");
  for (const char* kind : {"adamw", "sgd", "adafactor", "adamw_8bit"}) {
    Toy m(10);
    ParamArena arena(m);
    auto opt = make_optimizer(arena, config_of(kind, 0.0));
    for (int s = 0; s < 2; ++s) {
      random_grads(arena, 11 + s);
      opt->step(1e-2);
    }
    TrainerState st;
    st.global_step = 2;
    const std::string out = dir + "/" + kind;
    std::filesystem::create_directories(out);
    const std::string ck = save_checkpoint(
        out, [](const std::string&) {}, *opt, st, 0);
    Toy m2(10);
    ParamArena arena2(m2);
    auto back = make_optimizer(arena2, config_of(kind, 0.0));
    load_checkpoint(ck, *back, arena2);
    EXPECT_EQ(back->steps(), 2) << kind;
    auto a = opt->state(), b = back->state();
    ASSERT_EQ(a.size(), b.size()) << kind;
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].first, b[i].first);
      EXPECT_EQ(
          std::memcmp(a[i].second->raw_data(), b[i].second->raw_data(), a[i].second->nbytes()), 0)
          << kind;
    }
    // Another optimiser cannot take this state.
    auto other = make_optimizer(arena2, config_of(std::string(kind) == "sgd" ? "adamw" : "sgd", 0.0));
    EXPECT_THROW(load_checkpoint(ck, *other, arena2), ConfigError) << kind;
  }
}

}  // namespace
}  // namespace unillm::train
