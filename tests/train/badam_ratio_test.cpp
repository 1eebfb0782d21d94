// BAdam's ratio mode (train/badam_ratio.h): seeds and scatter masks against figures torch itself
// printed, adjacent masks and their moves against a naive restatement, the gradient cut (with the
// + 1e-9 of small tensors), the frozen-name rule, and an exact state round trip across a mask
// move. (The package itself, end to end: tests/reference/badam_ratio_check.py.)
#include "train/badam_ratio.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <deque>

#include "support/expect.h"

namespace unillm::train {
namespace {

// Tensors named and shaped as given, trainable, values 0.01·(i+1) + tensor index.
class Toy : public nn::Module {
 public:
  explicit Toy(const std::vector<std::pair<std::string, std::vector<int64_t>>>& specs) {
    testing::init_cpu();
    for (size_t t = 0; t < specs.size(); ++t) {
      int64_t n = 1;
      for (int64_t d : specs[t].second) n *= d;
      std::vector<float> v(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = 0.01f * (i + 1) + t;
      t_.push_back(Tensor::from_vector(v, specs[t].second));
      t_.back().set_requires_grad(true);
      register_parameter(specs[t].first, &t_.back());
    }
  }
  std::deque<Tensor> t_;
};

OptimizerConfig config(const std::string& mode, double ratio, int64_t every, uint64_t seed) {
  OptimizerConfig c;
  c.kind = "badam_ratio";
  c.badam.mask_mode = mode;
  c.badam.update_ratio = ratio;
  c.badam.ratio_switch_every = every;
  c.badam.seed = seed;
  return c;
}

const std::vector<std::pair<std::string, std::vector<int64_t>>> kTwoLayers = {
    {"model.layers.0.self_attn.q_proj.weight", {10, 12}},
    {"model.layers.0.input_layernorm.weight", {12}},
    {"model.layers.1.self_attn.q_proj.weight", {10, 12}},
    {"model.layers.1.input_layernorm.weight", {12}},
};

TEST(BAdamRatio, SeedsAndScatterMasksAreTorchs) {
  Toy toy({{"a", {10}}, {"b", {10}}, {"c", {10}}, {"d", {10}}});
  ParamArena arena(toy);
  // torch.manual_seed(7); [torch.randint(0, 1000, (1,)).item() for _ in range(5)]
  //   = [615, 892, 721, 286, 283]; the first draw is the embedding's.
  BAdamRatio opt(arena, config("scatter", 0.5, 100, 7));
  EXPECT_EQ(opt.seed_of(0), 892);
  EXPECT_EQ(opt.seed_of(3), 283);
  // Each [10] part's mask is its shape's owner's: the last part (d, seed 283).
  // torch.manual_seed(283); torch.randperm(10)[:5], sorted = [4, 5, 6, 7, 8]
  EXPECT_EQ(opt.mask_of(0, 0), (std::vector<int64_t>{4, 5, 6, 7, 8}));
  EXPECT_EQ(opt.mask_of(3, 0), (std::vector<int64_t>{4, 5, 6, 7, 8}));
}

TEST(BAdamRatio, AdjacentMasksMoveByTheKeptCount) {
  Toy toy(kTwoLayers);
  ParamArena arena(toy);
  BAdamRatio opt(arena, config("adjacent", 0.35, 3, 1));
  // [10, 12]: int(120 · 0.35) = 42 kept; the offset moves by 42 mod 120 after steps 3, 6, ...
  auto range = [](int64_t lo, int64_t k, int64_t n) {
    std::vector<int64_t> v;
    for (int64_t j = 0; j < k; ++j) v.push_back((lo + j) % n);
    std::sort(v.begin(), v.end());
    return v;
  };
  for (int64_t step : {0, 2}) EXPECT_EQ(opt.mask_of(0, step), range(0, 42, 120));
  EXPECT_EQ(opt.mask_of(2, 3), range(42, 42, 120));
  EXPECT_EQ(opt.mask_of(0, 6), range(84, 42, 120));  // wraps: [84, 120) ∪ [0, 6)
  EXPECT_EQ(opt.mask_of(0, 6).front(), 0);
  // [12]: int(12 · 0.35) = 4.
  EXPECT_EQ(opt.mask_of(1, 4), range(4, 4, 12));
  // Accumulating 2 backward passes: each pass of the step before a move moves the offset, and
  // the step's gradient is cut by the second pass's mask.
  OptimizerConfig c2 = config("adjacent", 0.35, 3, 1);
  c2.badam.backward_passes = 2;
  BAdamRatio acc(arena, c2);
  EXPECT_EQ(acc.mask_of(0, 1), range(0, 42, 120));
  EXPECT_EQ(acc.mask_of(0, 2), range(42, 42, 120));
  EXPECT_EQ(acc.mask_of(0, 3), range(84, 42, 120));
  EXPECT_EQ(acc.mask_of(0, 6), range(168, 42, 120));
}

TEST(BAdamRatio, CutsTheGradientAndNudgesSmallTensors) {
  Toy toy(kTwoLayers);
  ParamArena arena(toy);
  BAdamRatio opt(arena, config("adjacent", 0.35, 3, 1));
  const float g = 1e-6f;  // small enough for + 1e-9 to show in f32
  for (int64_t i = 0; i < arena.numel(); ++i) arena.grads()[i] = g;
  opt.prepare_grads();
  const auto& segs = arena.segments();
  const float* q = arena.grads() + segs[0].offset;
  for (int64_t j = 0; j < 120; ++j) EXPECT_EQ(q[j], j < 42 ? g : 0.0f) << j;
  const float* norm = arena.grads() + segs[1].offset;  // 12 < 100 elements: + 1e-9
  for (int64_t j = 0; j < 12; ++j) EXPECT_EQ(norm[j], j < 4 ? g + 1e-9f : 0.0f) << j;
  ASSERT_NE(g + 1e-9f, g);
  opt.step(1e-3);  // uses the cut gradients as they are (no second cut)
  EXPECT_EQ(norm[0], g + 1e-9f);
  EXPECT_EQ(q[50], 0.0f);
}

TEST(BAdamRatio, FrozenNamesAreTheFirstEmbedAndLmHead) {
  const std::vector<std::string> names = {"model.embed_tokens.weight", "model.layers.0.x.weight",
                                          "model.embed_positions.weight", "model.norm.weight",
                                          "lm_head.weight"};
  EXPECT_EQ(badam_ratio_frozen(names), (std::vector<bool>{true, false, false, false, true}));
}

// Steps with gradients g(step, i) = sin-like values; returns the final arena parameters.
std::vector<float> train(BAdamRatio& opt, ParamArena& arena, int64_t from, int64_t to) {
  for (int64_t s = from; s < to; ++s) {
    for (int64_t i = 0; i < arena.numel(); ++i)
      arena.grads()[i] = static_cast<float>(((i * 37 + s * 11) % 17) - 8) * 0.05f;
    opt.step(1e-2);
    arena.zero_grads();
  }
  return std::vector<float>(arena.params(), arena.params() + arena.numel());
}

TEST(BAdamRatio, StateRoundTripIsExactAcrossAMaskMove) {
  for (const char* mode : {"adjacent", "scatter"}) {
    Toy a_toy(kTwoLayers), b_toy(kTwoLayers);
    ParamArena a(a_toy), b(b_toy);
    BAdamRatio straight(a, config(mode, 0.2, 3, 9));
    const std::vector<float> want = train(straight, a, 0, 7);
    BAdamRatio first(b, config(mode, 0.2, 3, 9));
    train(first, b, 0, 2);  // then "save" and "load" into a new optimiser
    BAdamRatio resumed(b, config(mode, 0.2, 3, 9));
    resumed.set_steps(first.steps());
    for (size_t k = 0; k < resumed.state().size(); ++k)
      resumed.state()[k].second->copy_from(*first.state()[k].second);
    EXPECT_EQ(train(resumed, b, 2, 7), want) << mode;
    // Only kept entries ever move: the [10, 12] tensor has 24 per round, three rounds (in
    // scatter mode the steps before a move add masks of its own: it is not its shape's owner).
    int64_t moved = 0;
    for (int64_t j = 0; j < 120; ++j) moved += want[static_cast<size_t>(j)] != 0.01f * (j + 1);
    if (std::string(mode) == "adjacent") {
      EXPECT_LE(moved, 72);
    }
    EXPECT_GT(moved, 24) << mode;
  }
}

}  // namespace
}  // namespace unillm::train
