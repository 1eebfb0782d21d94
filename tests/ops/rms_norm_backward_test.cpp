// rms_norm backward: finite differences in f64, the f32 kernels (f32/bf16/f16 weights) vs the f64
// reference over sizes that split rows among threads, deterministic dw, frozen weight.
#include "grad_check_util.h"
#include "ops/rms_norm.h"

namespace unillm {
namespace {

class RmsNormBackwardTest : public optest::OpTest {};

TEST_F(RmsNormBackwardTest, MatchesFiniteDifferencesInF64) {
  Tensor x = optest::leaf({3, 2, 7}, DType::f64, 1, 2.0);
  Tensor w = optest::leaf({7}, DType::f64, 2);
  optest::check_grads([&] { return ops::rms_norm(x, w, 1e-5f); }, {x, w}, 3);
}

TEST_F(RmsNormBackwardTest, FastKernelsMatchReference) {
  uint64_t seed = 10;
  for (DType wt : {DType::f32, DType::bf16, DType::f16}) {
    for (int64_t dim : {1, 7, 64, 300}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(wt) << " dim=" << dim);
      const int64_t rows = 700;
      Tensor x = optest::leaf({rows, dim}, DType::f32, seed++, 2.0);
      Tensor w = optest::leaf({dim}, wt, seed++);
      Tensor dy = optest::randn({rows, dim}, DType::f32, seed++);
      autograd::backward(ops::rms_norm(x, w, 1e-6f), dy);
      ASSERT_EQ(w.grad().dtype(), DType::f32);
      Tensor x64 = x.to(DType::f64), w64 = w.to(DType::f64), dy64 = dy.to(DType::f64);
      Tensor dx = Tensor::empty(x.shape(), DType::f64), dw = Tensor::empty({dim}, DType::f64);
      ops::rms_norm_backward_reference({dy64.raw_data(), x64.raw_data(), w64.raw_data(),
                                        dx.raw_data(), dw.raw_data(), rows, dim, 1e-6f,
                                        DType::f64, DType::f64});
      optest::expect_close_rel(x.grad(), optest::doubles(dx), 1e-4);
      optest::expect_close_rel(w.grad(), optest::doubles(dw), 1e-4);
      // Deterministic: a second run gives identical bits.
      Tensor w2 = w.detach().clone().set_requires_grad(true);
      autograd::backward(ops::rms_norm(x.detach(), w2, 1e-6f), dy);
      EXPECT_EQ(optest::doubles(w2.grad()), optest::doubles(w.grad()));
    }
  }
}

TEST_F(RmsNormBackwardTest, F64KernelMatchesReference) {
  Tensor x = optest::leaf({5, 33}, DType::f64, 1), w = optest::leaf({33}, DType::f64, 2);
  Tensor dy = optest::randn({5, 33}, DType::f64, 3);
  autograd::backward(ops::rms_norm(x, w, 1e-5f), dy);
  Tensor dx = Tensor::empty({5, 33}, DType::f64), dw = Tensor::empty({33}, DType::f64);
  ops::rms_norm_backward_reference({dy.raw_data(), x.raw_data(), w.raw_data(), dx.raw_data(),
                                    dw.raw_data(), 5, 33, 1e-5f, DType::f64, DType::f64});
  optest::expect_near(x.grad(), optest::doubles(dx), 1e-12, 1e-10);
  optest::expect_near(w.grad(), optest::doubles(dw), 1e-12, 1e-10);
}

TEST_F(RmsNormBackwardTest, FrozenWeightGetsNoGradient) {
  Tensor x = optest::leaf({4, 8}, DType::f32, 1);
  Tensor w = optest::randn({8}, DType::bf16, 2);
  autograd::backward(ops::rms_norm(x, w, 1e-6f), optest::randn({4, 8}, DType::f32, 3));
  EXPECT_TRUE(x.grad().defined());
  EXPECT_FALSE(w.grad().defined());
}

}  // namespace
}  // namespace unillm
