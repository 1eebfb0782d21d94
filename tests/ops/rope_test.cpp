// rope: inverse frequencies (default, linear, llama3, yarn, dynamic) against oracles written in
// double from the HF formulas and the YaRN paper, and the rotation (full and partial) against a naive oracle.
#include "ops/rope.h"

#include "op_test_util.h"

namespace unillm {
namespace {

std::vector<double> inv_freq_oracle(double theta, int64_t dim) {
  std::vector<double> f;
  for (int64_t i = 0; i < dim; i += 2) f.push_back(1.0 / std::pow(theta, double(i) / double(dim)));
  return f;
}

// Llama 3.1 scaling: keep high frequencies, divide low ones by factor, blend in between.
std::vector<double> llama3_oracle(const ops::RopeConfig& c) {
  std::vector<double> f = inv_freq_oracle(c.theta, c.rot_dim);
  const double low_wl = c.original_max_position / c.low_freq_factor;
  const double high_wl = c.original_max_position / c.high_freq_factor;
  for (double& v : f) {
    const double wl = 2 * M_PI / v;
    if (wl < high_wl) continue;
    if (wl > low_wl) {
      v /= c.factor;
      continue;
    }
    double smooth = (c.original_max_position / wl - c.low_freq_factor) /
                    (c.high_freq_factor - c.low_freq_factor);
    v = (1 - smooth) * v / c.factor + smooth * v;
  }
  return f;
}

void expect_rel(const std::vector<float>& got, const std::vector<double>& want, double rtol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], rtol * std::fabs(want[i])) << "index " << i;
}

class RopeTest : public optest::OpTest {};

TEST_F(RopeTest, InvFreqDefaultLinearAndLlama3) {
  ops::RopeConfig c;
  c.theta = 10000;
  c.rot_dim = 4;
  std::vector<float> f = ops::rope_inv_freq(c);
  EXPECT_EQ(f, (std::vector<float>{1.0f, 0.01f}));
  c.rot_dim = 128;
  c.theta = 500000;
  expect_rel(ops::rope_inv_freq(c), inv_freq_oracle(c.theta, 128), 1e-6);
  c.scaling_type = "linear";
  c.factor = 4;
  std::vector<double> lin = inv_freq_oracle(c.theta, 128);
  for (double& v : lin) v /= 4;
  expect_rel(ops::rope_inv_freq(c), lin, 1e-6);
  c.scaling_type = "llama3";  // Llama 3.1 8B's rope_scaling
  c.factor = 8;
  c.low_freq_factor = 1;
  c.high_freq_factor = 4;
  c.original_max_position = 8192;
  std::vector<float> l3 = ops::rope_inv_freq(c);
  expect_rel(l3, llama3_oracle(c), 1e-5);
  EXPECT_EQ(l3[0], 1.0f);  // the highest frequency is untouched
  EXPECT_NEAR(l3[63], inv_freq_oracle(500000, 128)[63] / 8, 1e-12);  // the lowest divided
  c.scaling_type = "longrope";
  EXPECT_THROW(ops::rope_inv_freq(c), ConfigError);
  c.scaling_type = "";
  c.rot_dim = 7;
  EXPECT_THROW(ops::rope_inv_freq(c), ShapeError);
}

// YaRN (Peng et al. 2023, "NTK-by-parts"): dimension i turns r_i = L / wavelength_i times over
// the original length L; dimensions turning more than beta_fast times keep their frequency,
// fewer than beta_slow are divided by the factor, a linear ramp in the dimension index between
// (the range's ends rounded out to whole dimensions). Attention is scaled by 0.1·ln(s) + 1.
std::vector<double> yarn_oracle(const ops::RopeConfig& c) {
  std::vector<double> f = inv_freq_oracle(c.theta, c.rot_dim);
  const double d = c.rot_dim, L = c.original_max_position;
  // The dimension at which a frequency turns r times over L: theta^(-2j/d)·L = 2π·r.
  auto dim_at = [&](double r) { return d * std::log(L / (2 * M_PI * r)) / (2 * std::log(c.theta)); };
  const double lo = std::max(0.0, std::floor(dim_at(c.beta_fast)));
  const double hi = std::min(d - 1, std::ceil(dim_at(c.beta_slow)));
  for (size_t j = 0; j < f.size(); ++j) {
    const double ramp = std::clamp((double(j) - lo) / (hi - lo), 0.0, 1.0);  // 0: keep, 1: divide
    f[j] = f[j] * (1 - ramp) + f[j] / c.factor * ramp;
  }
  return f;
}

TEST_F(RopeTest, InvFreqYarnAndDynamic) {
  ops::RopeConfig c;
  c.theta = 1000000;  // Qwen2.5's documented yarn: factor 4 over 32768 positions, D = 128
  c.rot_dim = 128;
  c.scaling_type = "yarn";
  c.factor = 4;
  c.original_max_position = 32768;
  const std::vector<float> y = ops::rope_inv_freq(c);
  expect_rel(y, yarn_oracle(c), 2e-6);
  const std::vector<double> plain = inv_freq_oracle(c.theta, 128);
  EXPECT_NEAR(y[0], plain[0], 1e-7);                        // fast dimensions keep their frequency
  EXPECT_NEAR(y[63], plain[63] / 4, 1e-6 * plain[63] / 4);  // slow ones are interpolated
  EXPECT_NEAR(ops::rope_attention_factor(c), 0.1 * std::log(4.0) + 1, 1e-15);
  c.attention_factor = 1.25;
  EXPECT_EQ(ops::rope_attention_factor(c), 1.25);
  c.attention_factor = 0;
  c.mscale = 1;  // DeepSeek's ratio form: equal mscales cancel
  c.mscale_all_dim = 1;
  EXPECT_DOUBLE_EQ(ops::rope_attention_factor(c), 1.0);
  c.scaling_type = "llama3";
  EXPECT_EQ(ops::rope_attention_factor(c), 1.0);

  // Dynamic NTK: the base grows to theta·(s·n/L − (s−1))^(d/(d−2)) past L = max_position.
  ops::RopeConfig dyn;
  dyn.theta = 10000;
  dyn.rot_dim = 16;
  dyn.scaling_type = "dynamic";
  dyn.factor = 2;
  dyn.max_position = 8;
  expect_rel(ops::rope_inv_freq(dyn, 8), inv_freq_oracle(10000, 16), 1e-6);  // within L: the plain table
  expect_rel(ops::rope_inv_freq(dyn), inv_freq_oracle(10000, 16), 1e-6);
  const double base = 10000 * std::pow(2.0 * 19 / 8 - 1, 16.0 / 14.0);
  expect_rel(ops::rope_inv_freq(dyn, 19), inv_freq_oracle(base, 16), 5e-6);
  dyn.max_position = 0;
  EXPECT_THROW(ops::rope_inv_freq(dyn, 19), ConfigError);
}

std::vector<double> rope_oracle(const Tensor& x, const std::vector<int32_t>& pos,
                                const std::vector<float>& inv) {
  std::vector<double> xv = optest::doubles(x), y = xv;
  const int64_t n = x.size(0), heads = x.size(1), d = x.size(2), half = inv.size();
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < half; ++i) {
        // The contract: f32 tensors take the angle in f32 (as HF does), f64 in double.
        double ang = x.dtype() == DType::f32 ? double(float(pos[t]) * inv[i]) : double(pos[t]) * inv[i];
        const int64_t o = (t * heads + h) * d;
        double a = xv[o + i], b = xv[o + i + half];
        y[o + i] = a * std::cos(ang) - b * std::sin(ang);
        y[o + i + half] = b * std::cos(ang) + a * std::sin(ang);
      }
  return y;
}

TEST_F(RopeTest, RotationMatchesOracleFullAndPartial) {
  const std::vector<int32_t> pos = {0, 1, 7, 300, 4097, 131071, 2};
  ops::RopeConfig c;
  c.theta = 500000;
  for (DType t : {DType::f32, DType::f64}) {
    for (auto [d, rot] : {std::pair<int64_t, int64_t>{128, 128}, {10, 10}, {24, 12}, {36, 20}}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << " d=" << d << " rot=" << rot);
      c.rot_dim = rot;
      std::vector<float> inv = ops::rope_inv_freq(c);
      Tensor x = optest::randn({7, 3, d}, t, 9);
      Tensor positions = Tensor::from_ints(pos, {7});
      std::vector<double> want = rope_oracle(x, pos, inv);
      double tol = t == DType::f32 ? 1e-5 : 1e-12;
      optest::expect_near(ops::rope(x, positions, inv), want, tol, tol);
      Tensor ref = Tensor::empty(x.shape(), t);
      ops::RopeArgs a{x.raw_data(), ref.raw_data(), positions.data<int32_t>(), inv.data(), 7, 3, d,
                      rot, t};
      ops::rope_reference(a);
      optest::expect_near(ref, want, tol, tol);
    }
  }
}

TEST_F(RopeTest, BadShapesThrow) {
  Tensor x = optest::randn({2, 2, 8}, DType::f32, 1);
  std::vector<float> inv(4, 1.0f), too_long(5, 1.0f);
  EXPECT_THROW(ops::rope(x, Tensor::from_ints({0, 1, 2}, {3}), inv), ShapeError);
  EXPECT_THROW(ops::rope(x, Tensor::from_ints({0, 1}, {2}), too_long), ShapeError);
  EXPECT_THROW(ops::rope(x.view({4, 8}), Tensor::from_ints({0, 1, 2, 3}, {4}), inv), ShapeError);
  EXPECT_THROW(ops::rope(x, Tensor::from_vector({0, 1}, {2}), inv), DTypeError);
}

}  // namespace
}  // namespace unillm
