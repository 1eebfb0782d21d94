// rope: inverse frequencies (default, linear, llama3) against an oracle written from the HF
// formulas in double, and the rotation (full and partial) against a naive oracle.
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
  c.scaling_type = "yarn";
  EXPECT_THROW(ops::rope_inv_freq(c), ConfigError);
  c.scaling_type = "";
  c.rot_dim = 7;
  EXPECT_THROW(ops::rope_inv_freq(c), ShapeError);
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
