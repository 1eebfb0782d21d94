// add/mul (exact against the same-precision oracle) and gather_rows.
#include "ops/elementwise.h"
#include "ops/gather.h"

#include "op_test_util.h"

namespace unillm {
namespace {

class ElementwiseTest : public optest::OpTest {};

TEST_F(ElementwiseTest, AddAndMulAreExact) {
  for (DType t : {DType::f32, DType::f64}) {
    for (int64_t n : {1, 37, 100003}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << " n=" << n);
      Tensor a = optest::randn({n}, t, 1), b = optest::randn({n}, t, 2);
      std::vector<double> av = optest::doubles(a), bv = optest::doubles(b), s, p;
      for (int64_t i = 0; i < n; ++i) {
        // f32 sums/products of f32 values are the correctly rounded double results.
        s.push_back(t == DType::f32 ? double(float(av[i]) + float(bv[i])) : av[i] + bv[i]);
        p.push_back(t == DType::f32 ? double(float(av[i]) * float(bv[i])) : av[i] * bv[i]);
      }
      optest::expect_near(ops::add(a, b), s, 0, 0);
      optest::expect_near(ops::mul(a, b), p, 0, 0);
      Tensor r = Tensor::empty({n}, t);
      ops::add_reference({a.raw_data(), b.raw_data(), r.raw_data(), n, t});
      optest::expect_near(r, s, 0, 0);
      ops::mul_reference({a.raw_data(), b.raw_data(), r.raw_data(), n, t});
      optest::expect_near(r, p, 0, 0);
    }
  }
  Tensor a = optest::randn({2, 3}, DType::f32, 1);
  optest::expect_throw_with<ShapeError>([&] { ops::add(a, optest::randn({3, 2}, DType::f32, 2)); },
                                        "[add] b has shape [3, 2], expected [2, 3]");
  EXPECT_THROW(ops::mul(a, optest::randn({2, 3}, DType::f64, 2)), DTypeError);
  Tensor at = a.transpose(0, 1);  // non-contiguous
  optest::expect_near(ops::add(at, at), [&] {
    std::vector<double> v = optest::doubles(at);
    for (double& e : v) e *= 2;
    return v;
  }(), 0, 0);
}

TEST_F(ElementwiseTest, GatherRows) {
  for (DType t : {DType::f32, DType::bf16, DType::f64}) {
    Tensor x = optest::randn({5, 3}, t, 4);
    Tensor out = ops::gather_rows(x, Tensor::from_ints({2, 0, 4, 4}, {4}));
    EXPECT_EQ(out.dtype(), t);
    std::vector<double> xv = optest::doubles(x), want;
    for (int r : {2, 0, 4, 4})
      for (int c = 0; c < 3; ++c) want.push_back(xv[r * 3 + c]);
    optest::expect_near(out, want, 0, 0);
  }
  Tensor x = optest::randn({5, 3}, DType::f32, 4);
  optest::expect_throw_with<ShapeError>(
      [&] { ops::gather_rows(x, Tensor::from_ints({1, 5}, {2})); },
      "[gather_rows] idx[1] = 5 is outside [0, 5)");
  EXPECT_THROW(ops::gather_rows(x.view({15}), Tensor::from_ints({1}, {1})), ShapeError);
}

}  // namespace
}  // namespace unillm
