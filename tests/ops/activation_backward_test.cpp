// swiglu and softmax backward: finite differences in f64 and the f32 kernels vs the f64
// references.
#include "grad_check_util.h"
#include "ops/softmax.h"
#include "ops/swiglu.h"

namespace unillm {
namespace {

class ActivationBackwardTest : public optest::OpTest {};

TEST_F(ActivationBackwardTest, SwigluMatchesFiniteDifferencesInF64) {
  Tensor gu = optest::leaf({3, 2, 10}, DType::f64, 1, 2.0);
  optest::check_grads([&] { return ops::swiglu(gu); }, {gu}, 2);
}

TEST_F(ActivationBackwardTest, SwigluF32KernelMatchesReference) {
  for (int64_t f : {1, 13, 64}) {
    SCOPED_TRACE(f);
    Tensor gu = optest::leaf({33, 2 * f}, DType::f32, f, 3.0);
    Tensor dy = optest::randn({33, f}, DType::f32, 2);
    autograd::backward(ops::swiglu(gu), dy);
    Tensor gu64 = gu.to(DType::f64), dy64 = dy.to(DType::f64);
    Tensor want = Tensor::empty(gu.shape(), DType::f64);
    ops::swiglu_backward_reference({gu64.raw_data(), dy64.raw_data(), want.raw_data(), 33, f,
                                    DType::f64});
    optest::expect_near(gu.grad(), optest::doubles(want), 1e-6, 1e-4);
  }
}

TEST_F(ActivationBackwardTest, SoftmaxMatchesFiniteDifferencesInF64) {
  Tensor x = optest::leaf({4, 9}, DType::f64, 1, 2.0);
  optest::check_grads([&] { return ops::softmax(x); }, {x}, 2);
}

TEST_F(ActivationBackwardTest, SoftmaxF32KernelMatchesReference) {
  Tensor x = optest::leaf({17, 100}, DType::f32, 1, 3.0);
  Tensor dy = optest::randn({17, 100}, DType::f32, 2);
  Tensor y = ops::softmax(x);
  autograd::backward(y, dy);
  Tensor y64 = ops::softmax(x.detach().to(DType::f64)), dy64 = dy.to(DType::f64);
  Tensor want = Tensor::empty(x.shape(), DType::f64);
  ops::softmax_backward_reference({y64.raw_data(), dy64.raw_data(), want.raw_data(), 17, 100,
                                   DType::f64});
  optest::expect_close_rel(x.grad(), optest::doubles(want), 1e-4);
}

}  // namespace
}  // namespace unillm
