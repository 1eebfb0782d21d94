// rope backward: finite differences in f64 (full and partial rotary), f32 vs the f64 inverse
// rotation, and the round trip (backward of a rotation undoes it).
#include "grad_check_util.h"
#include "ops/rope.h"

namespace unillm {
namespace {

class RopeBackwardTest : public optest::OpTest {};

TEST_F(RopeBackwardTest, MatchesFiniteDifferencesInF64) {
  Tensor pos = Tensor::from_ints({0, 5, 17, 1000}, {4});
  for (int64_t rot : {8, 4}) {
    SCOPED_TRACE(rot);
    ops::RopeConfig cfg;
    cfg.rot_dim = rot;
    auto inv = ops::rope_inv_freq(cfg);
    Tensor x = optest::leaf({4, 3, 8}, DType::f64, rot);
    optest::check_grads([&] { return ops::rope(x, pos, inv); }, {x}, 2);
  }
}

TEST_F(RopeBackwardTest, F32MatchesF64AndUndoesTheRotation) {
  ops::RopeConfig cfg;
  cfg.rot_dim = 64;
  auto inv = ops::rope_inv_freq(cfg);
  std::vector<int32_t> p(19);
  for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<int32_t>(i * 7);
  Tensor pos = Tensor::from_ints(p, {19});
  Tensor x = optest::leaf({19, 4, 64}, DType::f32, 1);
  Tensor dy = optest::randn({19, 4, 64}, DType::f32, 2);
  autograd::backward(ops::rope(x, pos, inv), dy);
  Tensor x64 = optest::leaf({19, 4, 64}, DType::f64, 1);
  autograd::backward(ops::rope(x64, pos, inv), dy.to(DType::f64));
  optest::expect_close_rel(x.grad(), optest::doubles(x64.grad()), 1e-4);
  // Rotating the gradient forward again gives dy back.
  optest::expect_near(ops::rope(x64.grad(), pos, inv), optest::doubles(dy), 1e-10, 1e-10);
}

}  // namespace
}  // namespace unillm
