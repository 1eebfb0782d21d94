// add_rms_norm (the fuse_residual_rms_norm op): the fused kernel gives exactly the bits of ops::add
// then ops::rms_norm for every weight dtype and odd sizes; the reference matches a double oracle;
// with gradients it is the composed pair, whose gradients are those of add + rms_norm.
#include "ops/add_rms_norm.h"

#include "grad_check_util.h"
#include "ops/elementwise.h"
#include "ops/rms_norm.h"

namespace unillm {
namespace {

std::vector<double> oracle(const Tensor& x, const Tensor& d, const Tensor& w, double eps, std::vector<double>* sum) {
  std::vector<double> xv = optest::doubles(x), dv = optest::doubles(d), wv = optest::doubles(w), y(xv.size());
  sum->assign(xv.size(), 0.0);
  const size_t dim = wv.size();
  for (size_t r = 0; r < xv.size() / dim; ++r) {
    double ss = 0;
    for (size_t c = 0; c < dim; ++c) {
      // The sum is formed in f32, as the residual stream holds it.
      (*sum)[r * dim + c] = static_cast<float>(xv[r * dim + c] + dv[r * dim + c]);
      ss += (*sum)[r * dim + c] * (*sum)[r * dim + c];
    }
    const double inv = 1.0 / std::sqrt(ss / dim + eps);
    for (size_t c = 0; c < dim; ++c) y[r * dim + c] = (*sum)[r * dim + c] * inv * wv[c];
  }
  return y;
}

class AddRmsNormTest : public optest::OpTest {};

TEST_F(AddRmsNormTest, FusedEqualsAddThenRmsNormBitForBit) {
  uint64_t seed = 1;
  for (DType wt : {DType::f32, DType::bf16, DType::f16}) {
    for (int64_t dim : {1, 7, 64, 300, 4097}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(wt) << " dim=" << dim);
      Tensor x = optest::randn({3, 5, dim}, DType::f32, seed++, 3.0);
      Tensor d = optest::randn({3, 5, dim}, DType::f32, seed++, 0.5);
      Tensor w = optest::randn({dim}, wt, seed++);
      const float eps = 1e-5f;
      ops::AddRmsNormResult r = ops::add_rms_norm(x, d, w, eps);
      Tensor sum = ops::add(x, d);
      EXPECT_EQ(r.sum.to_float_vector(), sum.to_float_vector());
      EXPECT_EQ(r.y.to_float_vector(), ops::rms_norm(sum, w, eps).to_float_vector());
      std::vector<double> want_sum;
      std::vector<double> want = oracle(x, d, w, eps, &want_sum);
      optest::expect_near(r.y, want, 1e-7, 1e-5);
      // The reference (what a device without the kernel would run on the host).
      Tensor ys = Tensor::empty(x.shape(), DType::f32), yy = Tensor::empty(x.shape(), DType::f32);
      ops::AddRmsNormArgs a{x.data<float>(), d.data<float>(), w.raw_data(), ys.data<float>(), yy.data<float>(),
                            x.numel() / dim, dim, eps, wt};
      ops::add_rms_norm_reference(a);
      optest::expect_near(ys, want_sum, 0, 0);
      optest::expect_near(yy, want, 1e-7, 1e-5);
    }
  }
}

TEST_F(AddRmsNormTest, WithGradientsItIsTheComposedPair) {
  Tensor x = optest::leaf({6, 40}, DType::f32, 3, 2.0), d = optest::leaf({6, 40}, DType::f32, 4);
  Tensor w = optest::leaf({40}, DType::f32, 5);
  Tensor dy = optest::randn({6, 40}, DType::f32, 6), ds = optest::randn({6, 40}, DType::f32, 7);
  ops::AddRmsNormResult r = ops::add_rms_norm(x, d, w, 1e-6f);
  // Both outputs carry gradient: the stream continues from sum, the block reads y.
  autograd::backward(ops::add(r.y, ops::mul(r.sum, ds)), dy);
  Tensor x2 = x.detach().clone().set_requires_grad(true), d2 = d.detach().clone().set_requires_grad(true);
  Tensor w2 = w.detach().clone().set_requires_grad(true);
  Tensor s2 = ops::add(x2, d2);
  autograd::backward(ops::add(ops::rms_norm(s2, w2, 1e-6f), ops::mul(s2, ds)), dy);
  EXPECT_EQ(x.grad().to_float_vector(), x2.grad().to_float_vector());
  EXPECT_EQ(d.grad().to_float_vector(), d2.grad().to_float_vector());
  EXPECT_EQ(w.grad().to_float_vector(), w2.grad().to_float_vector());
}

TEST_F(AddRmsNormTest, BadShapesThrowAsTheComposedOpsDo) {
  Tensor x = optest::randn({2, 16}, DType::f32, 1);
  EXPECT_THROW(ops::add_rms_norm(x, optest::randn({2, 15}, DType::f32, 2), optest::randn({16}, DType::f32, 3), 1e-6f),
               ShapeError);
  optest::expect_throw_with<ShapeError>(
      [&] { ops::add_rms_norm(x, x, optest::randn({15}, DType::f32, 3), 1e-6f); },
      "[rms_norm] weight has 15 elements, expected 16");
}

}  // namespace
}  // namespace unillm
