// swiglu and softmax against double oracles, including saturating and large-offset inputs.
#include "ops/softmax.h"
#include "ops/swiglu.h"

#include "op_test_util.h"

namespace unillm {
namespace {

class ActivationTest : public optest::OpTest {};

TEST_F(ActivationTest, SwigluMatchesOracle) {
  for (DType t : {DType::f32, DType::f64}) {
    for (int64_t f : {1, 13, 261}) {
      for (double scale : {1.0, 8.0, 60.0}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(t) << " F=" << f << " scale=" << scale);
        Tensor gu = optest::randn({3, 2, 2 * f}, t, 7, scale);
        std::vector<double> v = optest::doubles(gu), want;
        for (int64_t r = 0; r < 6; ++r)
          for (int64_t i = 0; i < f; ++i) {
            double g = v[r * 2 * f + i], u = v[r * 2 * f + f + i];
            want.push_back(g / (1 + std::exp(-g)) * u);
          }
        double tol = t == DType::f32 ? 2e-6 : 1e-13;
        Tensor out = ops::swiglu(gu);
        EXPECT_EQ(shape_str(out.shape()), shape_str({3, 2, f}));
        optest::expect_near(out, want, tol, tol);
        Tensor ref = Tensor::empty(out.shape(), t);
        ops::swiglu_reference({gu.raw_data(), ref.raw_data(), 6, f, t});
        optest::expect_near(ref, want, tol, tol);
      }
    }
  }
  EXPECT_THROW(ops::swiglu(optest::randn({2, 5}, DType::f32, 1)), ShapeError);
  EXPECT_THROW(ops::swiglu(optest::randn({2, 4}, DType::bf16, 1)), DTypeError);
}

std::vector<double> softmax_oracle(const std::vector<double>& x, int64_t cols) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / cols; ++r) {
    double mx = x[r * cols], sum = 0;
    for (int64_t c = 0; c < cols; ++c) mx = std::max(mx, x[r * cols + c]);
    for (int64_t c = 0; c < cols; ++c) sum += std::exp(x[r * cols + c] - mx);
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = std::exp(x[r * cols + c] - mx) / sum;
  }
  return y;
}

TEST_F(ActivationTest, SoftmaxMatchesOracle) {
  for (DType t : {DType::f32, DType::f64}) {
    for (int64_t cols : {1, 7, 1000}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << " cols=" << cols);
      Tensor x = optest::randn({4, cols}, t, 3, 5.0);
      std::vector<double> xv = optest::doubles(x);
      for (int64_t c = 0; c < cols; ++c) xv[c] += 1e4;  // a row with a large offset
      x = Tensor::from_vector(std::vector<float>(xv.begin(), xv.end()), {4, cols}, t);
      xv = optest::doubles(x);
      std::vector<double> want = softmax_oracle(xv, cols);
      double tol = t == DType::f32 ? 1e-5 : 1e-13;
      optest::expect_near(ops::softmax(x), want, tol * 1e-2, tol);
      Tensor ref = Tensor::empty(x.shape(), t);
      ops::softmax_reference({x.raw_data(), ref.raw_data(), 4, cols, t});
      optest::expect_near(ref, want, tol * 1e-2, tol);
    }
  }
  Tensor with_inf = Tensor::from_vector({0.f, -INFINITY, 1.f, -INFINITY}, {1, 4});
  optest::expect_near(ops::softmax(with_inf), softmax_oracle({0, -INFINITY, 1, -INFINITY}, 4), 1e-7, 1e-6);
}

}  // namespace
}  // namespace unillm
