// add / mul backward: finite differences in f64, an operand used twice, and only the inputs that
// require grad get one.
#include "grad_check_util.h"
#include "ops/elementwise.h"

namespace unillm {
namespace {

class ElementwiseBackwardTest : public optest::OpTest {};

TEST_F(ElementwiseBackwardTest, MatchesFiniteDifferencesInF64) {
  Tensor a = optest::leaf({3, 4}, DType::f64, 1), b = optest::leaf({3, 4}, DType::f64, 2);
  optest::check_grads([&] { return ops::add(a, b); }, {a, b}, 3);
  Tensor c = optest::leaf({3, 4}, DType::f64, 4), d = optest::leaf({3, 4}, DType::f64, 5);
  optest::check_grads([&] { return ops::mul(ops::add(c, d), d); }, {c, d}, 6);
  Tensor e = optest::leaf({5}, DType::f64, 7);
  optest::check_grads([&] { return ops::mul(e, e); }, {e}, 8);  // d(e²) = 2e
}

TEST_F(ElementwiseBackwardTest, OnlyInputsThatRequireGrad) {
  Tensor a = optest::leaf({6}, DType::f32, 1), b = optest::randn({6}, DType::f32, 2);
  Tensor dy = optest::randn({6}, DType::f32, 3);
  autograd::backward(ops::mul(a, b), dy);
  EXPECT_FALSE(b.grad().defined());
  std::vector<double> want = optest::doubles(dy), bv = optest::doubles(b);
  for (size_t i = 0; i < want.size(); ++i) want[i] *= bv[i];
  optest::expect_near(a.grad(), want, 1e-7, 1e-6);
}

}  // namespace
}  // namespace unillm
