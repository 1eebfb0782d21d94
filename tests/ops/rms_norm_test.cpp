// rms_norm: kernel and reference against a double oracle for every weight dtype, odd sizes, and
// the weight-size error message.
#include "ops/rms_norm.h"

#include "op_test_util.h"

namespace unillm {
namespace {

std::vector<double> rms_oracle(const Tensor& x, const Tensor& w, double eps) {
  std::vector<double> xv = optest::doubles(x), wv = optest::doubles(w), y(xv.size());
  const size_t dim = wv.size();
  for (size_t r = 0; r < xv.size() / dim; ++r) {
    double ss = 0;
    for (size_t c = 0; c < dim; ++c) ss += xv[r * dim + c] * xv[r * dim + c];
    double inv = 1.0 / std::sqrt(ss / dim + eps);
    for (size_t c = 0; c < dim; ++c) y[r * dim + c] = xv[r * dim + c] * inv * wv[c];
  }
  return y;
}

Tensor run_reference(const Tensor& x, const Tensor& w, float eps) {
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  ops::RmsNormArgs a{x.raw_data(), w.raw_data(), y.raw_data(), x.numel() / w.numel(), w.numel(),
                     eps, x.dtype(), w.dtype()};
  ops::rms_norm_reference(a);
  return y;
}

class RmsNormTest : public optest::OpTest {};

TEST_F(RmsNormTest, MatchesOracleForEveryWeightDtype) {
  const std::pair<DType, DType> combos[] = {{DType::f32, DType::f32}, {DType::f32, DType::bf16},
                                            {DType::f32, DType::f16}, {DType::f64, DType::f64}};
  uint64_t seed = 1;
  for (auto [xt, wt] : combos) {
    for (int64_t dim : {1, 7, 64, 4097}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(wt) << " dim=" << dim);
      Tensor x = optest::randn({3, 5, dim}, xt, seed++, 3.0);
      Tensor w = optest::randn({dim}, wt, seed++);
      const float eps = 1e-5f;
      std::vector<double> want = rms_oracle(x, w, eps);
      double rtol = xt == DType::f64 ? 1e-12 : 1e-5;
      optest::expect_near(ops::rms_norm(x, w, eps), want, rtol * 1e-2, rtol);
      optest::expect_near(run_reference(x, w, eps), want, rtol * 1e-2, rtol);
    }
  }
}

TEST_F(RmsNormTest, NonContiguousInput) {
  Tensor x = optest::randn({40, 6}, DType::f32, 3).transpose(0, 1);  // [6, 40]
  Tensor w = optest::randn({6}, DType::f32, 4);
  optest::expect_throw_with<ShapeError>([&] { ops::rms_norm(x, w, 1e-6f); }, "expected 40");
  Tensor w40 = optest::randn({40}, DType::f32, 4);
  optest::expect_near(ops::rms_norm(x, w40, 1e-6f), rms_oracle(x, w40, 1e-6), 1e-7, 1e-5);
}

TEST_F(RmsNormTest, BadShapesAndDtypesThrow) {
  Tensor x = optest::randn({2, 4096}, DType::f32, 1);
  optest::expect_throw_with<ShapeError>(
      [&] { ops::rms_norm(x, optest::randn({4095}, DType::f32, 2), 1e-6f); },
      "[rms_norm] weight has 4095 elements, expected 4096");
  EXPECT_THROW(ops::rms_norm(x, optest::randn({4096}, DType::f64, 2), 1e-6f), DTypeError);
  EXPECT_THROW(ops::rms_norm(x.to(DType::bf16), optest::randn({4096}, DType::f32, 2), 1e-6f),
               DTypeError);
}

}  // namespace
}  // namespace unillm
