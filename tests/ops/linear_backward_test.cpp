// linear backward: gradients vs central differences in f64, the f32 kernels (f32/bf16/f16 W) vs
// the f64 reference, f32 master gradients for half weights, and no dW for a frozen weight.
#include "grad_check_util.h"
#include "ops/dispatch.h"
#include "ops/linear.h"

namespace unillm {
namespace {

class LinearBackwardTest : public optest::OpTest {};

TEST_F(LinearBackwardTest, MatchesFiniteDifferencesInF64) {
  Tensor x = optest::leaf({2, 3, 5}, DType::f64, 1);
  Tensor w = optest::leaf({4, 5}, DType::f64, 2);
  Tensor b = optest::leaf({4}, DType::f64, 3);
  optest::check_grads([&] { return ops::linear(x, w, b); }, {x, w, b}, 4);
}

TEST_F(LinearBackwardTest, FastKernelsMatchReference) {
  const int64_t m = 37, k = 1100, n = 300;  // 256-row conversion panels: two for half weights
  for (DType wt : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(wt));
    Tensor x = optest::leaf({m, k}, DType::f32, 5);
    Tensor w = optest::leaf({n, k}, wt, 6);
    Tensor b = optest::leaf({n}, DType::f32, 7);
    Tensor dy = optest::randn({m, n}, DType::f32, 8);
    autograd::backward(ops::linear(x, w, b), dy);
    ASSERT_EQ(w.grad().dtype(), DType::f32);
    Tensor x64 = x.to(DType::f64), w64 = w.to(DType::f64), dy64 = dy.to(DType::f64);
    Tensor dx = Tensor::empty({m, k}, DType::f64), dw = Tensor::empty({n, k}, DType::f64);
    Tensor db = Tensor::empty({n}, DType::f64);
    ops::linear_backward_reference({dy64.raw_data(), x64.raw_data(), w64.raw_data(), dx.raw_data(),
                                    dw.raw_data(), db.raw_data(), m, k, n, DType::f64, DType::f64});
    optest::expect_close_rel(x.grad(), optest::doubles(dx), 1e-4);
    optest::expect_close_rel(w.grad(), optest::doubles(dw), 1e-4);
    optest::expect_close_rel(b.grad(), optest::doubles(db), 1e-4);
  }
}

TEST_F(LinearBackwardTest, ReferenceMatchesF64Kernel) {
  Tensor x = optest::randn({6, 9}, DType::f64, 1), w = optest::randn({5, 9}, DType::f64, 2);
  Tensor dy = optest::randn({6, 5}, DType::f64, 3);
  Tensor dx = Tensor::empty({6, 9}, DType::f64), dw = Tensor::empty({5, 9}, DType::f64);
  ops::linear_backward_reference({dy.raw_data(), x.raw_data(), w.raw_data(), dx.raw_data(),
                                  dw.raw_data(), nullptr, 6, 9, 5, DType::f64, DType::f64});
  Tensor xl = x.clone().set_requires_grad(true), wl = w.clone().set_requires_grad(true);
  autograd::backward(ops::linear(xl, wl), dy);
  optest::expect_near(xl.grad(), optest::doubles(dx), 1e-12, 1e-12);
  optest::expect_near(wl.grad(), optest::doubles(dw), 1e-12, 1e-12);
}

TEST_F(LinearBackwardTest, FrozenWeightGetsNoGradient) {
  for (DType wt : {DType::f32, DType::bf16}) {
    Tensor x = optest::leaf({4, 16}, DType::f32, 1);
    Tensor w = optest::randn({8, 16}, wt, 2);  // frozen
    Tensor y = ops::linear(x, w);
    autograd::backward(y, optest::randn({4, 8}, DType::f32, 3));
    EXPECT_TRUE(x.grad().defined());
    EXPECT_FALSE(w.grad().defined());
  }
  // Only the weight needs grad: x gets none.
  Tensor x = optest::randn({4, 16}, DType::f32, 1);
  Tensor w = optest::leaf({8, 16}, DType::f32, 2);
  autograd::backward(ops::linear(x, w), optest::randn({4, 8}, DType::f32, 3));
  EXPECT_FALSE(x.grad().defined());
  EXPECT_TRUE(w.grad().defined());
}

TEST_F(LinearBackwardTest, NoGraphWithoutGradOrUnderNoGrad) {
  Tensor x = optest::randn({2, 3}, DType::f32, 1), w = optest::randn({4, 3}, DType::f32, 2);
  EXPECT_EQ(ops::linear(x, w).grad_fn(), nullptr);
  w.set_requires_grad(true);
  {
    autograd::NoGradGuard no_grad;
    EXPECT_EQ(ops::linear(x, w).grad_fn(), nullptr);
  }
  EXPECT_NE(ops::linear(x, w).grad_fn(), nullptr);
}

// kGradOnly (recompute's re-run): zeros of y's shape and the same backward node, so the same
// gradients bit for bit as a computed call.
TEST_F(LinearBackwardTest, GradOnlyGivesZerosAndTheSameGradients) {
  for (DType wt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(wt));
    std::vector<std::vector<double>> grads[2];
    for (int i = 0; i < 2; ++i) {
      const auto use = i == 0 ? ops::OutputUse::kValue : ops::OutputUse::kGradOnly;
      Tensor x = optest::leaf({2, 9, 40}, DType::f32, 1);
      Tensor w = optest::leaf({24, 40}, wt, 2);
      Tensor b = optest::leaf({24}, DType::f32, 3);
      Tensor y = ops::linear(x, w, b, use);
      ASSERT_EQ(y.shape(), (Shape{2, 9, 24}));
      if (i == 1) {
        EXPECT_EQ(optest::doubles(y), std::vector<double>(2 * 9 * 24, 0.0));
      }
      autograd::backward(y, optest::randn({2, 9, 24}, DType::f32, 4));
      grads[i] = {optest::doubles(x.grad()), optest::doubles(w.grad()), optest::doubles(b.grad())};
    }
    EXPECT_EQ(grads[0], grads[1]);
  }
}

}  // namespace
}  // namespace unillm
