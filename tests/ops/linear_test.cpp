// linear: the registered kernels (GEMV for M <= 4, sgemm, bf16/f16 panels, dgemm) and the reference
// against a naive double oracle written here, including odd sizes and error cases.
#include "ops/linear.h"

#include "op_test_util.h"

namespace unillm {
namespace {

using optest::doubles;

struct Oracle {
  std::vector<double> y, bound;  // y and Σ|x·w| + |b| per element (the rounding-error scale)
};

Oracle linear_oracle(const Tensor& x, const Tensor& w, const Tensor& b) {
  std::vector<double> xv = doubles(x), wv = doubles(w), bv;
  if (b.defined()) bv = doubles(b);
  const int64_t n = w.size(0), k = w.size(1), m = x.numel() / k;
  Oracle o{std::vector<double>(m * n), std::vector<double>(m * n)};
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = bv.empty() ? 0 : bv[j], a = bv.empty() ? 0 : std::fabs(bv[j]);
      for (int64_t p = 0; p < k; ++p) {
        s += xv[i * k + p] * wv[j * k + p];
        a += std::fabs(xv[i * k + p] * wv[j * k + p]);
      }
      o.y[i * n + j] = s;
      o.bound[i * n + j] = a;
    }
  return o;
}

Tensor run_reference(const Tensor& x, const Tensor& w, const Tensor& b) {
  const int64_t n = w.size(0), k = w.size(1), m = x.numel() / k;
  Tensor y = Tensor::empty({m, n}, x.dtype());
  ops::LinearArgs a{x.raw_data(), w.raw_data(), b.defined() ? b.raw_data() : nullptr, y.raw_data(),
                    m, k, n, x.dtype(), w.dtype()};
  ops::linear_reference(a);
  return y;
}

struct Case {
  int64_t m, k, n;
};
const Case kCases[] = {{1, 37, 19}, {1, 256, 64}, {2, 100, 33}, {3, 64, 65}, {4, 129, 70},
                       {5, 129, 70}, {17, 300, 131}, {6, 2048, 600}};

class LinearTest : public optest::OpTest {
 protected:
  void check(DType xt, DType wt, bool bias, double rtol) {
    uint64_t seed = 1;
    for (const Case& c : kCases) {
      SCOPED_TRACE(::testing::Message() << "M=" << c.m << " K=" << c.k << " N=" << c.n
                                        << " w=" << dtype_name(wt) << " bias=" << bias);
      Tensor x = optest::randn({c.m, c.k}, xt, seed++);
      Tensor w = optest::randn({c.n, c.k}, wt, seed++, 0.1);
      Tensor b = bias ? optest::randn({c.n}, xt, seed++) : Tensor();
      Oracle o = linear_oracle(x, w, b);
      Tensor y = ops::linear(x, w, b);
      EXPECT_EQ(y.dtype(), xt);
      optest::expect_near(y, o.y, 1e-7, rtol, o.bound);
      if (c.k * c.n * c.m < 200000) optest::expect_near(run_reference(x, w, b), o.y, 1e-7, rtol, o.bound);
    }
  }
};

TEST_F(LinearTest, F32MatchesOracle) {
  check(DType::f32, DType::f32, false, 1e-5);
  check(DType::f32, DType::f32, true, 1e-5);
}

TEST_F(LinearTest, Bf16AndF16WeightsMatchOracleOnConvertedWeights) {
  check(DType::f32, DType::bf16, true, 1e-5);
  check(DType::f32, DType::f16, false, 1e-5);
}

TEST_F(LinearTest, F64MatchesOracle) { check(DType::f64, DType::f64, true, 1e-12); }

TEST_F(LinearTest, BatchedAndNonContiguousInput) {
  Tensor x = optest::randn({2, 3, 24}, DType::f32, 11);
  Tensor w = optest::randn({10, 24}, DType::f32, 12);
  Tensor y = ops::linear(x, w);
  EXPECT_EQ(shape_str(y.shape()), "[2, 3, 10]");
  Oracle o = linear_oracle(x, w, Tensor());
  optest::expect_near(y, o.y, 1e-7, 1e-5, o.bound);
  Tensor xt = optest::randn({24, 5}, DType::f32, 13).transpose(0, 1);  // [5, 24], strided
  Oracle ot = linear_oracle(xt, w, Tensor());
  optest::expect_near(ops::linear(xt, w), ot.y, 1e-7, 1e-5, ot.bound);
}

TEST_F(LinearTest, BadShapesAndDtypesThrow) {
  Tensor x = optest::randn({2, 8}, DType::f32, 1);
  optest::expect_throw_with<ShapeError>([&] { ops::linear(x, optest::randn({4, 7}, DType::f32, 2)); },
                                        "[linear] weight has shape [4, 7], expected [N, 8]");
  optest::expect_throw_with<ShapeError>(
      [&] { ops::linear(x, optest::randn({4, 8}, DType::f32, 2), optest::randn({5}, DType::f32, 3)); },
      "[linear] bias has shape [5], expected [4]");
  EXPECT_THROW(ops::linear(x, optest::randn({4, 8}, DType::f64, 2)), DTypeError);
  EXPECT_THROW(ops::linear(x.to(DType::f64), optest::randn({4, 8}, DType::bf16, 2)), DTypeError);
  EXPECT_THROW(ops::linear(Tensor::from_ints({1, 2}, {1, 2}), optest::randn({4, 2}, DType::f32, 2)),
               DTypeError);
  EXPECT_THROW(ops::linear(x, optest::randn({8}, DType::f32, 2)), ShapeError);
}

}  // namespace
}  // namespace unillm
