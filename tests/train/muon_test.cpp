// Muon (train/muon.h): the bf16 Newton–Schulz iteration against a naive triple-loop oracle with
// its own bf16 rounding, which HF tensors take Muon, two steps against a double re-statement of
// LLaMA-Factory's Muon/AdamW, and the checkpoint round trip of its state.
#include "train/muon.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/rng.h"
#include "support/expect.h"
#include "support/run_cli.h"
#include "train/checkpoint.h"
#include "train/memory_plan.h"

namespace unillm::train {
namespace {

// Nearest bf16 (8 significant bits), ties to even, by scaling: independent of core/dtype.h.
double bf16_oracle(double x) {
  if (x == 0) return 0;
  int e = 0;
  std::frexp(x, &e);  // |x| in [2^(e-1), 2^e)
  const double ulp = std::ldexp(1.0, e - 8);
  return std::nearbyint(x / ulp) * ulp;
}

using MatD = std::vector<double>;

// [m, k] · [k, n], summed in double, rounded to f32 then bf16.
MatD mm(const MatD& a, const MatD& b, int64_t m, int64_t k, int64_t n) {
  MatD out(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t t = 0; t < k; ++t) s += a[i * k + t] * b[t * n + j];
      out[i * n + j] = bf16_oracle(static_cast<float>(s));
    }
  return out;
}

MatD tr(const MatD& a, int64_t r, int64_t c) {
  MatD t(a.size());
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) t[j * r + i] = a[i * c + j];
  return t;
}

// zeropower_via_newtonschulz5 as the published Python reads, each op rounded to bf16.
MatD naive_ns5(const std::vector<float>& g, int64_t rows, int64_t cols) {
  auto rb = [](double x) { return bf16_oracle(static_cast<float>(x)); };
  const bool tall = rows > cols;
  const int64_t r = tall ? cols : rows, c = tall ? rows : cols;
  MatD x(g.begin(), g.end());
  for (double& v : x) v = rb(v);
  if (tall) x = tr(x, rows, cols);
  double ss = 0;
  for (double v : x) ss += v * v;
  const double d = rb(rb(std::sqrt(ss)) + 1e-7);
  for (double& v : x) v = rb(v / d);
  const double a = 3.4445f, b = -4.7750f, cc = 2.0315f;  // the f32 scalars torch's opmath uses
  for (int s = 0; s < 5; ++s) {
    const MatD A = mm(x, tr(x, r, c), r, c, r);
    MatD cA(A.size()), B(A.size());
    for (size_t i = 0; i < A.size(); ++i) cA[i] = rb(cc * A[i]);
    const MatD cAA = mm(cA, A, r, r, r);
    for (size_t i = 0; i < A.size(); ++i) B[i] = rb(rb(b * A[i]) + cAA[i]);
    const MatD BX = mm(B, x, r, r, c);
    for (size_t i = 0; i < x.size(); ++i) x[i] = rb(rb(a * x[i]) + BX[i]);
  }
  return tall ? tr(x, r, c) : x;
}

std::vector<float> randn(int64_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = static_cast<float>(rng.uniform_double() - 0.5);
  return v;
}

TEST(Muon, RoundBf16TiesToEven) {
  EXPECT_EQ(round_bf16(1.0f), 1.0f);
  EXPECT_EQ(round_bf16(3.4445f), 3.4375f);
  EXPECT_EQ(round_bf16(1.0f + 1.0f / 256), 1.0f);  // halfway: to the even mantissa
  EXPECT_EQ(round_bf16(1.0f + 3.0f / 256), 1.0f + 4.0f / 256);
  for (float x : randn(1000, 1)) EXPECT_EQ(round_bf16(x), static_cast<float>(bf16_oracle(x)));
}

TEST(Muon, NewtonSchulzMatchesNaiveBf16OracleAndOrthogonalises) {
  testing::init_cpu();
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{12, 40}, {40, 12}, {16, 16}}) {
    const std::vector<float> g = randn(rows * cols, 2 + rows);
    const std::vector<float> got = newton_schulz5(g.data(), rows, cols, 5);
    const MatD want = naive_ns5(g, rows, cols);
    // Equal here; f32 vs double accumulation may flip a product's last bf16 bit on other GEMMs.
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
    EXPECT_LT(worst, 1e-2) << rows << "x" << cols;
    // Singular values land near 1 (Keller Jordan: roughly in [0.5, 1.5]): diag of U·Uᵀ over the
    // shorter side.
    const int64_t r = std::min(rows, cols);
    const MatD u(got.begin(), got.end());
    const MatD uut = rows <= cols ? mm(u, tr(u, rows, cols), rows, cols, rows)
                                  : mm(tr(u, rows, cols), u, cols, rows, cols);
    for (int64_t i = 0; i < r; ++i) {
      EXPECT_GT(uut[i * r + i], 0.25) << i;
      EXPECT_LT(uut[i * r + i], 2.25) << i;
    }
  }
  // A tall matrix is orthogonalised through its transpose: exactly the transposed result.
  const std::vector<float> g = randn(40 * 12, 3);
  std::vector<float> gt(g.size());
  for (int64_t i = 0; i < 40; ++i)
    for (int64_t j = 0; j < 12; ++j) gt[j * 40 + i] = g[i * 12 + j];
  const std::vector<float> a = newton_schulz5(g.data(), 40, 12, 5),
                           b = newton_schulz5(gt.data(), 12, 40, 5);
  for (int64_t i = 0; i < 40; ++i)
    for (int64_t j = 0; j < 12; ++j) ASSERT_EQ(a[i * 12 + j], b[j * 40 + i]);
}

TEST(Muon, TakesHiddenMatricesOnly) {
  EXPECT_TRUE(muon_takes("model.layers.0.self_attn.q_proj.weight", true));
  EXPECT_TRUE(muon_takes("model.layers.0.mlp.down_proj.lora_A.default.weight", true));
  EXPECT_FALSE(muon_takes("model.embed_tokens.weight", true));
  EXPECT_FALSE(muon_takes("lm_head.weight", true));
  EXPECT_FALSE(muon_takes("model.layers.0.input_layernorm.weight", false));
  EXPECT_FALSE(muon_takes("model.layers.0.self_attn.q_proj.bias", false));
}

// q/k/v fused [48, 32] (q 32 rows, k and v 8), an embedding [50, 32], a norm [32].
class Tiny : public nn::Module {
 public:
  explicit Tiny(uint64_t seed) {
    testing::init_cpu();
    auto fill = [seed](Tensor& t, const Shape& s, uint64_t k) {
      t = Tensor::from_vector(randn(s[0] * (s.size() > 1 ? s[1] : 1), seed * 10 + k), s);
      t.set_requires_grad(true);
    };
    fill(qkv, {48, 32}, 1);
    fill(embed, {50, 32}, 2);
    fill(norm, {32}, 3);
    const std::string a = "model.layers.0.self_attn.";
    register_fused_parameter("qkv", &qkv,
                             {{a + "q_proj.weight", 0, 32},
                              {a + "k_proj.weight", 32, 40},
                              {a + "v_proj.weight", 40, 48}});
    register_parameter("model.embed_tokens.weight", &embed);
    register_parameter("model.layers.0.input_layernorm.weight", &norm);
  }
  Tensor qkv, embed, norm;
};

void set_grads(ParamArena& arena, uint64_t seed) {
  const std::vector<float> g = randn(arena.numel(), seed);
  std::copy(g.begin(), g.end(), arena.grads());
}

TEST(Muon, TwoStepsMatchLlamaFactoryRestated) {
  Tiny m(4);
  ParamArena arena(m);
  const double lr = 2e-3, wd = 0.1, b1 = 0.9, b2 = 0.95, eps = 1e-8;
  Muon opt(arena, {b1, b2, eps, wd});
  EXPECT_EQ(opt.muon_numel(), 48 * 32);
  EXPECT_EQ(opt.adamw_numel(), 50 * 32 + 32);
  const int64_t n = arena.numel();
  std::vector<double> p(arena.params(), arena.params() + n), buf(n, 0), m1(n, 0), m2(n, 0);
  for (int step = 1; step <= 2; ++step) {
    set_grads(arena, 20 + step);
    const float* g = arena.grads();
    for (const ArenaPart& part : arena_parts(arena)) {
      const int64_t o = part.offset, k = part.numel();
      if (muon_takes(part.seg->name, part.matrix)) {
        std::vector<float> nes(k);
        for (int64_t i = 0; i < k; ++i) {
          buf[o + i] = 0.95 * buf[o + i] + g[o + i];
          nes[i] = static_cast<float>(g[o + i] + 0.95 * buf[o + i]);
        }
        const MatD u = naive_ns5(nes, part.rows, part.cols);
        const double adj =
            lr * 0.2 * std::sqrt(static_cast<double>(std::max(part.rows, part.cols)));
        for (int64_t i = 0; i < k; ++i) p[o + i] = p[o + i] * (1 - lr * wd) - adj * u[i];
      } else {
        const double scale = (1 - std::pow(b1, step)) / std::sqrt(1 - std::pow(b2, step));
        for (int64_t i = 0; i < k; ++i) {
          const double gi = g[o + i];
          m1[o + i] = b1 * m1[o + i] + (1 - b1) * gi;
          m2[o + i] = b2 * m2[o + i] + (1 - b2) * gi * gi;
          p[o + i] =
              p[o + i] * (1 - lr * wd) - lr / scale * m1[o + i] / (eps + std::sqrt(m2[o + i]));
        }
      }
    }
    opt.step(lr);
  }
  for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(arena.params()[i], p[i], 2e-5) << i;
  EXPECT_EQ(opt.state_bytes(), 4 * (48 * 32 + 2 * (50 * 32 + 32)));
}

OptimizerConfig config(const std::string& kind) {
  OptimizerConfig c;
  c.kind = kind;
  return c;
}

TEST(Muon, CheckpointRoundTripsItsState) {
  const std::string dir = testing::temp_dir("muon_ckpt");
  Tiny m(5);
  ParamArena arena(m);
  auto opt = make_optimizer(arena, config("muon"));
  for (int s = 0; s < 2; ++s) {
    set_grads(arena, 30 + s);
    opt->step(1e-2);
  }
  TrainerState st;
  st.global_step = 2;
  std::filesystem::create_directories(dir);
  const std::string ck = save_checkpoint(
      dir, [](const std::string&) {}, *opt, st, 0);
  Tiny m2(5);
  ParamArena arena2(m2);
  auto back = make_optimizer(arena2, config("muon"));
  load_checkpoint(ck, *back, arena2);
  EXPECT_EQ(back->steps(), 2);
  auto a = opt->state(), b = back->state();
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_EQ(std::memcmp(a[i].second->raw_data(), b[i].second->raw_data(), a[i].second->nbytes()),
              0);
  }
  auto adamw = make_optimizer(arena2, config("adamw"));
  EXPECT_THROW(load_checkpoint(ck, *adamw, arena2), ConfigError);
}

TEST(Muon, PlannedStateIsTheMomentumAndAdamWsSecondMomentOfEmbeddings) {
  EXPECT_EQ(planned_state_bytes("muon", 1000, 10), 4000);
  // L 1, C 8, F 16, V 32, untied: embed 256 + lm_head 256 get AdamW's second moment as well.
  models::ModelConfig c;
  c.model_type = "llama";
  c.num_layers = 1, c.hidden_size = 8, c.intermediate_size = 16, c.num_heads = 2;
  c.num_kv_heads = 1, c.head_dim = 4, c.vocab_size = 32;
  TrainArgs a;
  a.finetuning_type = "full";
  MemoryPlanInputs in;
  in.model = c;
  in.params = summarize_params(c, a);
  in.optimizer = "muon";
  EXPECT_EQ(plan_memory(in).optimizer, 4 * in.params.trainable + 4 * 2 * 256);
  in.model.tie_word_embeddings = true;
  in.params = summarize_params(in.model, a);
  EXPECT_EQ(plan_memory(in).optimizer, 4 * in.params.trainable + 4 * 256);
}

}  // namespace
}  // namespace unillm::train
