// GaLore and APOLLO (train/galore.h, train/apollo.h, train/projector.h): LLaMA-Factory's target
// rule, projections against known singular vectors and their adjoint, per-HF-part targets of a
// fused matrix, the plain AdamW of the other tensors, refresh intervals, APOLLO's random basis and
// norm-growth limiter, exact resume through a checkpoint, and the config keys' rules.
#include "train/galore.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/rng.h"
#include "support/expect.h"
#include "support/run_cli.h"
#include "train/apollo.h"
#include "train/args.h"
#include "train/checkpoint.h"

namespace unillm::train {
namespace {

// A fused [12, 16] q/k matrix (q: 8 rows, k: 4), a [20, 6] down_proj, lm_head [10, 6] and a norm.
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
    fill(qk, {12, 16});
    fill(down, {20, 6});
    fill(head, {10, 6});
    fill(norm, {6});
    register_fused_parameter("qk", &qk,
                             {{"model.layers.0.self_attn.q_proj.weight", 0, 8},
                              {"model.layers.0.self_attn.k_proj.weight", 8, 12}});
    register_parameter("model.layers.0.mlp.down_proj.weight", &down);
    register_parameter("lm_head.weight", &head);
    register_parameter("model.norm.weight", &norm);
  }
  Tensor qk, down, head, norm;
};

void random_grads(ParamArena& arena, uint64_t seed, float scale = 0.1f) {
  Rng rng(seed);
  for (int64_t i = 0; i < arena.numel(); ++i)
    arena.grads()[i] = static_cast<float>(rng.uniform_double() - 0.5) * scale;
}

OptimizerConfig config(const std::string& kind, const std::vector<std::string>& target = {"all"}) {
  OptimizerConfig c;
  c.kind = kind;
  c.weight_decay = 0.1;
  c.low_rank = kind == "apollo" ? apollo_defaults() : LowRankSettings{};
  c.low_rank.use = true;
  c.low_rank.rank = 3;
  c.low_rank.update_interval = 2;
  c.low_rank.target = target;
  return c;
}

TEST(LowRank, TargetsAreLlamaFactoryLinearWeights) {
  const std::vector<std::string> all{"all"};
  EXPECT_TRUE(is_low_rank_target("model.layers.3.self_attn.q_proj.weight", all));
  EXPECT_TRUE(is_low_rank_target("model.layers.3.mlp.down_proj.weight", all));
  EXPECT_TRUE(is_low_rank_target("v_head.summary.weight", all));  // TRL's value head is a Linear
  EXPECT_FALSE(is_low_rank_target("lm_head.weight", all));        // find_all_linear_modules
  EXPECT_FALSE(is_low_rank_target("model.embed_tokens.weight", all));  // an nn.Embedding
  EXPECT_FALSE(is_low_rank_target("model.layers.3.self_attn.q_proj.bias", all));
  const std::vector<std::string> mlp{"mlp", "o_proj"};  // substrings of the module name
  EXPECT_TRUE(is_low_rank_target("model.layers.0.mlp.up_proj.weight", mlp));
  EXPECT_TRUE(is_low_rank_target("model.layers.0.self_attn.o_proj.weight", mlp));
  EXPECT_FALSE(is_low_rank_target("model.layers.0.self_attn.q_proj.weight", mlp));
}

TEST(LowRank, ProjectionSides) {
  EXPECT_EQ(projection_shape("std", 8, 4, 16, true).side, ProjSide::kRight);  // rows >= cols
  EXPECT_EQ(projection_shape("std", 8, 4, 16, true).r, 4);  // U[:, :16] keeps what exists
  EXPECT_EQ(projection_shape("std", 4, 8, 2, true).side, ProjSide::kLeft);
  EXPECT_EQ(projection_shape("reverse_std", 8, 4, 2, true).side, ProjSide::kLeft);
  EXPECT_EQ(projection_shape("std", 8, 4, 16, false).r, 16);  // a random basis is [r, cols]
  const ProjShape full = projection_shape("full", 8, 4, 2, true);
  EXPECT_EQ(full.low_size(), 4);
  EXPECT_EQ(full.left_size(), 16);
  EXPECT_EQ(full.right_size(), 8);
  EXPECT_THROW(projection_shape("diagonal", 8, 4, 2, true), ConfigError);
}

// Orthonormal columns of a random [m, k] (Gram–Schmidt), row-major.
std::vector<double> orthonormal(int64_t m, int64_t k, uint64_t seed) {
  Rng rng(seed);
  std::vector<double> q(static_cast<size_t>(m * k));
  for (auto& x : q) x = rng.normal();
  for (int64_t j = 0; j < k; ++j) {
    for (int64_t i = 0; i < j; ++i) {
      double d = 0;
      for (int64_t e = 0; e < m; ++e) d += q[e * k + i] * q[e * k + j];
      for (int64_t e = 0; e < m; ++e) q[e * k + j] -= d * q[e * k + i];
    }
    double n = 0;
    for (int64_t e = 0; e < m; ++e) n += q[e * k + j] * q[e * k + j];
    for (int64_t e = 0; e < m; ++e) q[e * k + j] /= std::sqrt(n);
  }
  return q;
}

TEST(LowRank, SvdBasisIsTheTopSingularVectorsWithFixedSigns) {
  const int64_t R = 9, C = 5;
  const std::vector<double> u = orthonormal(R, C, 1), v = orthonormal(C, C, 2);
  const double s[] = {5, 4, 3, 2, 1};
  std::vector<float> g(static_cast<size_t>(R * C));
  for (int64_t i = 0; i < R; ++i)
    for (int64_t j = 0; j < C; ++j) {
      double x = 0;
      for (int64_t q = 0; q < C; ++q) x += u[i * C + q] * s[q] * v[j * C + q];
      g[i * C + j] = static_cast<float>(x);
    }
  const ProjShape full = projection_shape("full", R, C, 2, true);
  std::vector<float> left(full.left_size()), right(full.right_size());
  svd_basis(g.data(), full, left.data(), right.data());
  // Column q of the left basis is ±u_q, row q of the right one ±v_q; the largest entry positive.
  for (int64_t q = 0; q < 2; ++q) {
    int64_t bu = 0, bv = 0;
    for (int64_t i = 1; i < R; ++i)
      bu = std::fabs(u[i * C + q]) > std::fabs(u[bu * C + q]) ? i : bu;
    for (int64_t j = 1; j < C; ++j)
      bv = std::fabs(v[j * C + q]) > std::fabs(v[bv * C + q]) ? j : bv;
    const double su = u[bu * C + q] < 0 ? -1 : 1, sv = v[bv * C + q] < 0 ? -1 : 1;
    for (int64_t i = 0; i < R; ++i) EXPECT_NEAR(left[i * 2 + q], su * u[i * C + q], 1e-5) << i;
    for (int64_t j = 0; j < C; ++j) EXPECT_NEAR(right[q * C + j], sv * v[j * C + q], 1e-5) << j;
  }
}

TEST(LowRank, ProjectBackIsTheAdjointOfProject) {
  for (const char* type : {"std", "reverse_std", "full"}) {
    const ProjShape s = projection_shape(type, 7, 11, 3, true);
    Rng rng(4);
    std::vector<float> g(77), low(s.low_size()), left(s.left_size()), right(s.right_size());
    for (auto& x : g) x = static_cast<float>(rng.normal());
    for (auto& x : low) x = static_cast<float>(rng.normal());
    svd_basis(g.data(), s, left.data(), right.data());
    std::vector<float> pg(s.low_size()), back(77);
    project(g.data(), s, left.data(), right.data(), pg.data());
    project_back(low.data(), s, left.data(), right.data(), 1.0f, back.data());
    double a = 0, b = 0;  // <project(G), L> = <G, project_back(L)>
    for (int64_t i = 0; i < s.low_size(); ++i) a += static_cast<double>(pg[i]) * low[i];
    for (int64_t i = 0; i < 77; ++i) b += static_cast<double>(g[i]) * back[i];
    EXPECT_NEAR(a, b, 1e-4 * std::fabs(b)) << type;
  }
}

TEST(Galore, ProjectsEachHfPartOfAFusedMatrix) {
  Toy m(1);
  ParamArena arena(m);
  Galore all(arena, config("galore"));
  const auto& l = all.layout();
  ASSERT_EQ(l.slots.size(), 5u);  // q, k, down, lm_head, norm
  EXPECT_TRUE(l.slots[0].target);
  EXPECT_TRUE(l.slots[1].target);
  EXPECT_EQ(l.slots[1].shape.rows, 4);  // k alone: [4, 16], projected on the left with r 3
  EXPECT_EQ(l.slots[1].shape.side, ProjSide::kLeft);
  EXPECT_TRUE(l.slots[2].target);
  EXPECT_FALSE(l.slots[3].target);  // lm_head
  EXPECT_FALSE(l.slots[4].target);
  // Moments: q [3, 16], k [3, 16], down [20, 3]; lm_head and norm full size.
  EXPECT_EQ(l.moments, 48 + 48 + 60 + 60 + 6);
  Galore q_only(arena, config("galore", {"q_proj"}));
  EXPECT_TRUE(q_only.layout().slots[0].target);
  EXPECT_FALSE(q_only.layout().slots[1].target);
  EXPECT_THROW(Galore(arena, config("galore", {"gate_proj"})), ConfigError);
}

TEST(Galore, OtherTensorsTakeTransformersAdamWWithDecayAfterTheUpdate) {
  Toy m(2);
  ParamArena arena(m);
  Galore opt(arena, config("galore"));
  const LowRankSlot& head = opt.layout().slots[3];
  const int64_t o = head.part.offset;
  double p = arena.params()[o], mm = 0, vv = 0;
  for (int step = 1; step <= 3; ++step) {
    random_grads(arena, 10 + step);
    const double g = arena.grads()[o], lr = 1e-2;
    opt.step(lr);
    mm = 0.9 * mm + 0.1 * g;
    vv = 0.999 * vv + 0.001 * g * g;
    p -= lr * std::sqrt(1 - std::pow(0.999, step)) / (1 - std::pow(0.9, step)) * mm /
         (std::sqrt(vv) + 1e-8);
    p -= lr * 0.1 * p;
    EXPECT_NEAR(arena.params()[o], p, 1e-6) << step;
  }
}

TEST(Galore, RefreshesTheBasisEveryInterval) {
  Toy m(3);
  ParamArena arena(m);
  Galore opt(arena, config("galore"));
  auto basis = [&opt] {
    for (auto& named : opt.state())
      if (named.first == "proj_right")
        return std::vector<float>(named.second->data<float>(),
                                  named.second->data<float>() + named.second->numel());
    return std::vector<float>();
  };
  std::vector<std::vector<float>> seen;
  for (int s = 0; s < 4; ++s) {
    random_grads(arena, 20 + s);
    opt.step(1e-2);
    seen.push_back(basis());
  }
  EXPECT_EQ(seen[0], seen[1]);  // steps 0 and 1 share the basis of step 0's gradient
  EXPECT_NE(seen[1], seen[2]);  // step 2 = 0 mod 2: a new SVD
  EXPECT_EQ(seen[2], seen[3]);
}

// Values printed by torch 1.13: torch.randn(n, generator=torch.Generator().manual_seed(seed)) and
// apollo_torch's next_seed(7).
TEST(Apollo, RandomBasisIsTorchsRandn) {
  const std::vector<float> small = torch_randn(7, 8);  // below 16: normal_distribution<double>
  const float want_small[] = {-0.1467951f, 0.7861413f,  0.9468216f,  -1.1143440f,
                              1.6907902f,  -0.8948279f, -0.3556250f, 1.2323858f};
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(small[i], want_small[i], 1e-6) << i;
  const std::vector<float> big = torch_randn(3, 20);  // blocks of 16, the last 16 redrawn
  EXPECT_NEAR(big[0], -0.0766443f, 1e-6);
  EXPECT_NEAR(big[8], 0.4046071f, 1e-6);
  EXPECT_NEAR(big[15], -0.1468082f, 1e-6);
  EXPECT_NEAR(big[19], 1.3527540f, 1e-6);
  EXPECT_EQ(next_projection_seed(7), 5315348148554365958u);
  const ProjShape s = projection_shape("std", 400, 300, 50, false);  // right: [50, 300]
  std::vector<float> a(s.right_size());
  random_basis(s, 7, nullptr, a.data());
  double mean = 0, sq = 0;
  for (float x : a) mean += x, sq += static_cast<double>(x) * x;
  mean /= static_cast<double>(a.size());
  sq /= static_cast<double>(a.size());
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(sq, 1.0 / 50, 0.02 / 50);  // variance 1/r
}

TEST(Apollo, NormGrowthLimiterCapsTheScaledGradient) {
  Toy m(4);
  ParamArena arena(m);
  Apollo opt(arena, config("apollo"));
  Tensor* norms = nullptr;
  for (auto& named : opt.state())
    if (named.first == "scaled_grad_norm") norms = named.second;
  ASSERT_NE(norms, nullptr);
  ASSERT_EQ(norms->numel(), 3);  // q, k, down_proj
  random_grads(arena, 30);
  opt.step(1e-3);
  for (int64_t i = 0; i < 3; ++i) {
    EXPECT_GT(norms->data<float>()[i], 0.1f);  // ‖scaled gradient‖ of a normal step
    norms->data<float>()[i] = 1e-3f;           // as if the previous step's had been tiny
  }
  const int64_t q = opt.layout().slots[0].part.offset;
  const std::vector<float> before(arena.params() + q, arena.params() + q + 8 * 16);
  random_grads(arena, 31);
  opt.step(1e-3);
  // The limiter lets the norm grow by 1.01× at most: 1.01·(1e-3 + 1e-8).
  for (int64_t i = 0; i < 3; ++i)
    EXPECT_NEAR(norms->data<float>()[i], 1.01 * (1e-3 + 1e-8), 1e-9) << i;
  // So q moved by lr · step_size-factor · sqrt(32) · 1.01e-3 in norm, besides its weight decay.
  double moved = 0;
  for (int64_t i = 0; i < 8 * 16; ++i) {
    const double d = before[i] * (1 - 1e-3 * 0.1) - arena.params()[q + i];
    moved += d * d;
  }
  const double step_size = 1e-3 * std::sqrt(1 - 0.999 * 0.999) / (1 - 0.9 * 0.9);
  // (within 2%: each weight's f32 rounding is a few % of such a small move)
  const double expected = step_size * std::sqrt(32.0) * 1.01 * (1e-3 + 1e-8);
  EXPECT_NEAR(std::sqrt(moved), expected, 0.02 * expected);
}

// Steps 0..2, a checkpoint, then steps 3..5 from it against the uninterrupted run: bit for bit.
void expect_exact_resume(const OptimizerConfig& c, const std::string& dir) {
  Toy m(5);
  ParamArena arena(m);
  auto opt = make_optimizer(arena, c);
  for (int s = 0; s < 3; ++s) {
    random_grads(arena, 40 + s);
    opt->step(1e-2);
  }
  std::filesystem::create_directories(dir);
  TrainerState st;
  st.global_step = 3;
  const std::string ck = save_checkpoint(
      dir, [](const std::string&) {}, *opt, st, 0);
  Toy m2(99);  // other weights: the checkpoint's replace them
  ParamArena arena2(m2);
  std::memcpy(arena2.params(), arena.params(), static_cast<size_t>(arena.numel()) * 4);
  auto back = make_optimizer(arena2, c);
  load_checkpoint(ck, *back, arena2);
  EXPECT_EQ(back->steps(), 3);
  for (int s = 3; s < 6; ++s) {  // step 4 refreshes the basis (a new seed for APOLLO)
    random_grads(arena, 40 + s);
    random_grads(arena2, 40 + s);
    opt->step(1e-2);
    back->step(1e-2);
  }
  EXPECT_EQ(std::memcmp(arena.params(), arena2.params(), static_cast<size_t>(arena.numel()) * 4), 0)
      << c.kind;
  OptimizerConfig adamw;
  auto other = make_optimizer(arena2, adamw);
  EXPECT_THROW(load_checkpoint(ck, *other, arena2), ConfigError) << c.kind;
}

TEST(LowRank, ResumeFromACheckpointIsExact) {
  const std::string dir = testing::temp_dir("low_rank_ckpt");
  expect_exact_resume(config("galore"), dir + "/galore");
  OptimizerConfig svd = config("apollo");
  svd.low_rank.proj = "svd";
  svd.low_rank.scale_type = "tensor";
  expect_exact_resume(config("apollo"), dir + "/apollo");
  expect_exact_resume(svd, dir + "/apollo_svd");
}

}  // namespace
}  // namespace unillm::train
