// oft_rotate / oft_linear: the rotation blocks against naive math (the Cayley–Neumann series by
// explicit powers; the exact Cayley transform by its defining identity and orthogonality), the
// rotated input and the fused-parts linear against a naive oracle, the CPU kernels against the
// references, gradients of x and the skew weight against central differences in f64.
#include <cmath>

#include "core/registry.h"
#include "grad_check_util.h"
#include "ops/oft_linear.h"
#include "ops/oft_rotate.h"

namespace unillm {
namespace {

class OftRotateTest : public optest::OpTest {};

using Mat = std::vector<double>;

Mat mul(const Mat& a, const Mat& b, int64_t n) {
  Mat c(static_cast<size_t>(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t k = 0; k < n; ++k) c[i * n + j] += a[i * n + k] * b[k * n + j];
  return c;
}

// Q from the strict upper triangle, row-major (torch.triu_indices(b, b, 1)).
Mat skew(const double* v, int64_t b) {
  Mat q(static_cast<size_t>(b * b), 0.0);
  int64_t e = 0;
  for (int64_t i = 0; i < b; ++i)
    for (int64_t j = i + 1; j < b; ++j) {
      q[i * b + j] = v[e];
      q[j * b + i] = -v[e++];
    }
  return q;
}

// I + 2·Σ_{i=1}^{terms−1} Q^i, each power computed from scratch.
Mat neumann(const Mat& q, int64_t b, int64_t terms) {
  Mat r(static_cast<size_t>(b * b), 0.0);
  for (int64_t i = 0; i < b; ++i) r[i * b + i] = 1;
  for (int64_t p = 1; p < terms; ++p) {
    Mat pw = q;
    for (int64_t k = 1; k < p; ++k) pw = mul(pw, q, b);
    for (size_t e = 0; e < r.size(); ++e) r[e] += 2 * pw[e];
  }
  return r;
}

TEST_F(OftRotateTest, NeumannBlocksAreTheSeries) {
  const int64_t b = 5, blocks = 3, n = b * (b - 1) / 2;
  const std::vector<double> v = optest::doubles(optest::randn({blocks, n}, DType::f64, 1, 0.3));
  for (int64_t terms : {0, 1, 2, 3, 5, 7}) {
    const std::vector<double> got = ops::oft_rotation_blocks(v.data(), blocks, b, true, terms);
    for (int64_t j = 0; j < blocks; ++j) {
      const Mat want = neumann(skew(v.data() + j * n, b), b, terms);
      for (int64_t e = 0; e < b * b; ++e) EXPECT_NEAR(got[j * b * b + e], want[e], 1e-12) << "terms " << terms;
    }
  }
}

TEST_F(OftRotateTest, ExactCayleyIsOrthogonalAndSolvesItsDefinition) {
  const int64_t b = 6, n = b * (b - 1) / 2;
  const std::vector<double> v = optest::doubles(optest::randn({2, n}, DType::f64, 2, 0.8));
  const std::vector<double> got = ops::oft_rotation_blocks(v.data(), 2, b, false, 5);
  for (int64_t j = 0; j < 2; ++j) {
    const Mat q = skew(v.data() + j * n, b);
    const Mat r(got.begin() + j * b * b, got.begin() + (j + 1) * b * b);
    Mat ip = q, im = q;  // I + Q, I − Q
    for (auto& x : im) x = -x;
    for (int64_t i = 0; i < b; ++i) ip[i * b + i] += 1, im[i * b + i] += 1;
    const Mat lhs = mul(r, ip, b);  // R(I + Q) = I − Q
    Mat rt(r.size());
    for (int64_t i = 0; i < b; ++i)
      for (int64_t k = 0; k < b; ++k) rt[i * b + k] = r[k * b + i];
    const Mat rtr = mul(rt, r, b);
    for (int64_t i = 0; i < b; ++i)
      for (int64_t k = 0; k < b; ++k) {
        EXPECT_NEAR(lhs[i * b + k], im[i * b + k], 1e-12);
        EXPECT_NEAR(rtr[i * b + k], i == k ? 1.0 : 0.0, 1e-12);
      }
  }
}

// x · blockdiag(R_j) with R from rows [first, first + K/b) of w.
std::vector<double> rotate_oracle(const std::vector<double>& x, const std::vector<double>& w, int64_t m,
                                  int64_t k, int64_t b, int64_t first, bool neu, int64_t terms) {
  const int64_t n = b * (b - 1) / 2;
  std::vector<double> y(x.size(), 0.0);
  for (int64_t j = 0; j < k / b; ++j) {
    const Mat q = skew(w.data() + (first + j) * n, b);
    Mat r = neumann(q, b, terms);
    if (!neu) r = ops::oft_rotation_blocks(w.data() + (first + j) * n, 1, b, false, 0);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t c = 0; c < b; ++c)
        for (int64_t e = 0; e < b; ++e) y[i * k + j * b + c] += x[i * k + j * b + e] * r[e * b + c];
  }
  return y;
}

TEST_F(OftRotateTest, ForwardMatchesOracleInF32AndF64) {
  const int64_t m = 5, k = 12, b = 4, n = 6;
  for (DType dt : {DType::f32, DType::f64})
    for (bool neu : {true, false}) {
      Tensor x = optest::randn({m, k}, dt, 3), w = optest::randn({5, n}, dt, 4, 0.3);
      Tensor y = ops::oft_rotate(x, {w, 2, b, neu, 5});
      optest::expect_close_rel(y, rotate_oracle(optest::doubles(x), optest::doubles(w), m, k, b, 2, neu, 5),
                               dt == DType::f32 ? 1e-5 : 1e-12);
    }
}

TEST_F(OftRotateTest, CpuKernelsMatchTheReferences) {
  const int64_t m = 7, k = 96, b = 32;
  Tensor x = optest::randn({m, k}, DType::f32, 5), r = optest::randn({k / b, b, b}, DType::f32, 6);
  Tensor dy = optest::randn({m, k}, DType::f32, 7);
  auto* mm = kernel_registry().find_exact<ops::OftBlockMatmulKernel>("oft_block_matmul", DeviceKind::cpu, DType::f32);
  auto* gk = kernel_registry().find_exact<ops::OftBlockGradKernel>("oft_block_grad", DeviceKind::cpu, DType::f32);
  ASSERT_TRUE(mm != nullptr && gk != nullptr);
  for (bool t : {false, true}) {
    Tensor y1 = Tensor::empty({m, k}, DType::f32), y2 = Tensor::empty({m, k}, DType::f32);
    mm({x.raw_data(), r.raw_data(), y1.raw_data(), m, k, b, t, DType::f32});
    ops::oft_block_matmul_reference({x.raw_data(), r.raw_data(), y2.raw_data(), m, k, b, t, DType::f32});
    optest::expect_close_rel(y1, optest::doubles(y2), 1e-6);
  }
  Tensor g1 = Tensor::empty({k / b, b, b}, DType::f32), g2 = Tensor::empty({k / b, b, b}, DType::f32);
  gk({x.raw_data(), dy.raw_data(), g1.raw_data(), m, k, b, DType::f32});
  ops::oft_block_grad_reference({x.raw_data(), dy.raw_data(), g2.raw_data(), m, k, b, DType::f32});
  optest::expect_close_rel(g1, optest::doubles(g2), 1e-6);
}

TEST_F(OftRotateTest, GradientsMatchFiniteDifferences) {
  for (bool neu : {true, false})
    for (int64_t terms : {5, 3, 1}) {
      if (!neu && terms != 5) continue;
      SCOPED_TRACE((neu ? "neumann terms " + std::to_string(terms) : std::string("exact cayley")));
      Tensor x = optest::leaf({2, 3, 8}, DType::f64, 8), w = optest::leaf({5, 6}, DType::f64, 9, 0.4);
      optest::check_grads([&] { return ops::oft_rotate(x, {w, 1, 4, neu, terms}); }, {x, w}, 10);
      // rows outside [1, 3) get no gradient
      const std::vector<double> g = optest::doubles(w.grad());
      for (int64_t i : {0, 3, 4})
        for (int64_t e = 0; e < 6; ++e) EXPECT_EQ(g[i * 6 + e], 0.0);
    }
}

// W [10, 8] as [q 4; k 2; v 4], OFT on q and v (weight rows [0, 2) and [2, 4)), bias on all.
TEST_F(OftRotateTest, FusedLinearMatchesOracleAndFiniteDifferences) {
  const int64_t m = 3, k = 8, b = 4;
  Tensor x = optest::leaf({m, k}, DType::f64, 11), w = optest::randn({10, k}, DType::f64, 12, 0.5);
  Tensor bias = optest::randn({10}, DType::f64, 13), skewt = optest::leaf({4, 6}, DType::f64, 14, 0.4);
  ops::OftLinearInput in{skewt, b, true, 5, {{0, 4, 0}, {4, 2, -1}, {6, 4, 2}}};
  Tensor y = ops::oft_linear(x, w, bias, in);
  const std::vector<double> xv = optest::doubles(x), wv = optest::doubles(w), bv = optest::doubles(bias),
                            sv = optest::doubles(skewt);
  std::vector<double> want(static_cast<size_t>(m * 10));
  const std::vector<double> xq = rotate_oracle(xv, sv, m, k, b, 0, true, 5), xvv = rotate_oracle(xv, sv, m, k, b, 2, true, 5);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t o = 0; o < 10; ++o) {
      const std::vector<double>& src = o < 4 ? xq : o < 6 ? xv : xvv;
      double s = bv[o];
      for (int64_t e = 0; e < k; ++e) s += src[i * k + e] * wv[o * k + e];
      want[i * 10 + o] = s;
    }
  optest::expect_close_rel(y, want, 1e-12);
  optest::check_grads([&] { return ops::oft_linear(x, w, bias, in); }, {x, skewt}, 15);
}

TEST_F(OftRotateTest, RejectsBadShapesAndATrainableBase) {
  Tensor x = optest::randn({2, 10}, DType::f32, 1), w = optest::randn({4, 6}, DType::f32, 2);
  optest::expect_throw_with<ShapeError>([&] { ops::oft_rotate(x, {w, 0, 4, true, 5}); }, "blocks of 4");
  Tensor x8 = optest::randn({2, 8}, DType::f32, 1);
  optest::expect_throw_with<ShapeError>([&] { ops::oft_rotate(x8, {w, 3, 4, true, 5}); }, "rows [3, 5)");
  Tensor base = optest::randn({3, 8}, DType::f32, 3);
  base.set_requires_grad(true);
  Tensor xl = optest::leaf({2, 8}, DType::f32, 4);
  optest::expect_throw_with<NotImplemented>(
      [&] { ops::oft_linear(xl, base, Tensor(), {w, 4, true, 5, {{0, 3, 0}}}); }, "frozen");
  optest::expect_throw_with<ShapeError>(
      [&] { ops::oft_linear(x8, base.detach(), Tensor(), {w, 4, true, 5, {{0, 2, 0}}}); }, "cover");
}

}  // namespace
}  // namespace unillm
