// GPTQ (ops/gptq.h): with uncorrelated inputs (H = I) it is round-to-nearest exactly; on
// correlated inputs it agrees with an independent reference written from the paper's
// inverse-Hessian update (no Cholesky: H⁻¹ shrunk by one column per step), and its output
// error on the calibration inputs is well below round-to-nearest's; dead inputs; errors.
#include "ops/gptq.h"

#include <algorithm>
#include <cmath>

#include "core/rng.h"
#include "op_test_util.h"

namespace unillm {
namespace {

using Mat = std::vector<double>;

// Gauss-Jordan inverse of a symmetric positive definite k × k matrix.
Mat inverse(Mat a, int64_t k) {
  Mat inv(static_cast<size_t>(k * k), 0.0);
  for (int64_t i = 0; i < k; ++i) inv[i * k + i] = 1;
  for (int64_t c = 0; c < k; ++c) {
    const double p = a[c * k + c];
    for (int64_t j = 0; j < k; ++j) a[c * k + j] /= p, inv[c * k + j] /= p;
    for (int64_t r = 0; r < k; ++r) {
      if (r == c) continue;
      const double f = a[r * k + c];
      for (int64_t j = 0; j < k; ++j) a[r * k + j] -= f * a[c * k + j], inv[r * k + j] -= f * inv[c * k + j];
    }
  }
  return inv;
}

// The value of w's nearest code under a group's scale (and lo), from the formulas of quant.h.
double nearest_value(double w, float scale, float lo, ops::QuantType t, bool sym) {
  if (scale == 0) return t == ops::QuantType::int4 && !sym ? lo : 0.0;
  const auto x = static_cast<float>(w);
  if (t == ops::QuantType::int8) return scale * std::clamp(std::nearbyint(x / scale), -127.0f, 127.0f);
  if (sym) return scale * std::clamp(std::nearbyint(x / scale), -8.0f, 7.0f);
  return scale * std::clamp(std::nearbyint((x - lo) / scale), 0.0f, 15.0f) + lo;
}

// The paper's formulation: quantise column i, spread (w_i − q_i) / Hinv_ii · Hinv_i· over the
// later columns, then remove i from Hinv (Hinv −= Hinv_·i Hinv_i· / Hinv_ii). A group's scale
// comes from ops::quantize_weight on the group's current weights (the same fitting rule).
// Returns the dequantised weights.
std::vector<double> reference(const Tensor& w, Mat h, int64_t k, ops::QuantType type, int64_t group, bool sym) {
  const int64_t n = w.size(0);
  std::vector<float> wf = w.to_float_vector();
  Mat W(wf.begin(), wf.end());
  double mean = 0;
  for (int64_t i = 0; i < k; ++i) mean += h[i * k + i];
  for (int64_t i = 0; i < k; ++i) h[i * k + i] += 0.01 * mean / static_cast<double>(k);
  Mat hinv = inverse(h, k);
  if (type == ops::QuantType::int8) group = k;
  std::vector<double> out(static_cast<size_t>(n * k));
  std::vector<float> scales, mins;
  for (int64_t i = 0; i < k; ++i) {
    if (i % group == 0) {
      const int64_t len = std::min(group, k - i);
      std::vector<float> cur(static_cast<size_t>(n * len));
      for (int64_t r = 0; r < n; ++r)
        for (int64_t j = 0; j < len; ++j) cur[r * len + j] = static_cast<float>(W[r * k + i + j]);
      const ops::QuantizedWeight q = ops::quantize_weight(Tensor::from_vector(cur, {n, len}), type, len, sym);
      scales = q.scales.to_float_vector();
      mins = q.mins.defined() ? q.mins.to_float_vector() : std::vector<float>(static_cast<size_t>(n), 0.0f);
    }
    const double d = hinv[i * k + i];
    for (int64_t r = 0; r < n; ++r) {
      const double v = nearest_value(W[r * k + i], scales[r], mins[r], type, sym);
      out[r * k + i] = v;
      const double e = (W[r * k + i] - v) / d;
      for (int64_t j = i + 1; j < k; ++j) W[r * k + j] -= e * hinv[i * k + j];
    }
    Mat next = hinv;
    for (int64_t a = 0; a < k; ++a)
      for (int64_t b = 0; b < k; ++b) next[a * k + b] -= hinv[a * k + i] * hinv[i * k + b] / d;
    hinv = next;
  }
  return out;
}

// Calibration inputs with correlated features: X = Z · M, Z ~ N(0, 1).
std::vector<double> inputs(int64_t rows, int64_t k, uint64_t seed) {
  Rng rng(seed);
  std::vector<double> m(static_cast<size_t>(k * k)), z(static_cast<size_t>(rows * k)), x(static_cast<size_t>(rows * k));
  for (auto& v : m) v = rng.normal();
  for (int64_t i = 0; i < k; ++i) m[i * k + i] += 3.0;
  for (auto& v : z) v = rng.normal();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < k; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += z[r * k + p] * m[p * k + j];
      x[r * k + j] = s;
    }
  return x;
}

Mat gram(const std::vector<double>& x, int64_t rows, int64_t k) {
  Mat h(static_cast<size_t>(k * k), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t a = 0; a < k; ++a)
      for (int64_t b = 0; b < k; ++b) h[a * k + b] += x[r * k + a] * x[r * k + b];
  return h;
}

Tensor f64_tensor(const Mat& h, int64_t k) {
  Tensor t = Tensor::empty({k, k}, DType::f64);
  std::copy(h.begin(), h.end(), t.data<double>());
  return t;
}

// Σ over the calibration rows of ‖x · (W − Q)ᵀ‖².
double output_error(const std::vector<double>& x, int64_t rows, const Tensor& w, const std::vector<double>& q) {
  const int64_t n = w.size(0), k = w.size(1);
  const std::vector<float> wf = w.to_float_vector();
  double e = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < n; ++o) {
      double s = 0;
      for (int64_t j = 0; j < k; ++j) s += x[r * k + j] * (wf[o * k + j] - q[o * k + j]);
      e += s * s;
    }
  return e;
}

class GptqTest : public optest::OpTest {};

TEST_F(GptqTest, UncorrelatedInputsGiveRoundToNearest) {
  const int64_t n = 12, k = 70;
  Tensor w = optest::randn({n, k}, DType::f32, 1);
  Mat eye(static_cast<size_t>(k * k), 0.0);
  for (int64_t i = 0; i < k; ++i) eye[i * k + i] = 5.0;
  for (auto [type, group, sym] : {std::tuple{ops::QuantType::int8, int64_t{0}, true},
                                  std::tuple{ops::QuantType::int4, int64_t{32}, false},
                                  std::tuple{ops::QuantType::int4, int64_t{32}, true}}) {
    ops::QuantizedWeight g = ops::gptq_quantize_weight(w, f64_tensor(eye, k), type, group, sym);
    ops::QuantizedWeight r = ops::quantize_weight(w, type, group, sym);
    EXPECT_EQ(optest::doubles(ops::dequantize_weight(g)), optest::doubles(ops::dequantize_weight(r)));
    // act order: its static groups are round to nearest's, and with no correlation nothing moves.
    ops::QuantizedWeight a = ops::gptq_quantize_weight(w, f64_tensor(eye, k), type, group, sym, 0.01, "w",
                                                       DType::f32, true);
    EXPECT_EQ(optest::doubles(ops::dequantize_weight(a)), optest::doubles(ops::dequantize_weight(r)));
  }
}

TEST_F(GptqTest, MatchesThePapersUpdateAndBeatsRoundToNearest) {
  const int64_t n = 16, k = 72, rows = 400;  // k: two full groups of 32 and a short one of 8
  const std::vector<double> x = inputs(rows, k, 7);
  const Mat h = gram(x, rows, k);
  Tensor w = optest::randn({n, k}, DType::f32, 3, 0.5);
  for (auto [type, group, sym] : {std::tuple{ops::QuantType::int8, int64_t{0}, true},
                                  std::tuple{ops::QuantType::int4, int64_t{32}, false},
                                  std::tuple{ops::QuantType::int4, int64_t{32}, true}}) {
    SCOPED_TRACE(::testing::Message() << ops::quant_type_name(type) << (sym ? " sym" : " asym"));
    const std::vector<double> got = optest::doubles(ops::dequantize_weight(
        ops::gptq_quantize_weight(w, f64_tensor(h, k), type, group, sym)));
    const std::vector<double> want = reference(w, h, k, type, group, sym);
    int64_t differ = 0;
    for (size_t i = 0; i < got.size(); ++i) differ += std::fabs(got[i] - want[i]) > 1e-5 * (1 + std::fabs(want[i]));
    // Both sweep in double but in different orders; a weight on a rounding boundary may flip.
    EXPECT_LE(differ, static_cast<int64_t>(got.size() / 200)) << differ << " of " << got.size() << " weights differ";
    const double gptq = output_error(x, rows, w, got);
    const double rtn = output_error(x, rows, w, optest::doubles(ops::dequantize_weight(ops::quantize_weight(w, type, group, sym))));
    EXPECT_LT(gptq, 0.8 * rtn) << "gptq " << gptq << " vs round-to-nearest " << rtn;
    // act order (static groups, columns by falling H_ii) on inputs of unequal energy.
    std::vector<double> xs = x;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < k; ++j) xs[r * k + j] *= 0.2 + 0.05 * static_cast<double>((j * 37) % k);
    const Mat hs = gram(xs, rows, k);
    const std::vector<double> ordered = optest::doubles(ops::dequantize_weight(
        ops::gptq_quantize_weight(w, f64_tensor(hs, k), type, group, sym, 0.01, "w", DType::f32, true)));
    const double act = output_error(xs, rows, w, ordered);
    const double rtn_s = output_error(xs, rows, w, optest::doubles(ops::dequantize_weight(ops::quantize_weight(w, type, group, sym))));
    EXPECT_LT(act, 0.8 * rtn_s) << "act order " << act << " vs round-to-nearest " << rtn_s;
  }
}

TEST_F(GptqTest, DeadInputsZeroTheirWeights) {
  const int64_t n = 4, k = 40, rows = 100;
  std::vector<double> x = inputs(rows, k, 9);
  for (int64_t r = 0; r < rows; ++r) x[r * k + 5] = 0;  // input 5 never fires
  Tensor w = optest::randn({n, k}, DType::f32, 4);
  const std::vector<double> q = optest::doubles(ops::dequantize_weight(
      ops::gptq_quantize_weight(w, f64_tensor(gram(x, rows, k), k), ops::QuantType::int8, 0, true)));
  for (int64_t r = 0; r < n; ++r) EXPECT_EQ(q[r * k + 5], 0.0);
}

TEST_F(GptqTest, BadShapesAreClearErrors) {
  optest::expect_throw_with<ShapeError>(
      [] {
        ops::gptq_quantize_weight(optest::randn({4, 8}, DType::f32, 1), Tensor::zeros({7, 7}, DType::f64),
                                  ops::QuantType::int8, 0, true, 0.01, "layers.0.mlp.weight");
      },
      "[gptq] layers.0.mlp.weight: hessian has shape [7, 7], expected [8, 8]");
}

}  // namespace
}  // namespace unillm
