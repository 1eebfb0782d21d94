// take_rows / take_cols (ops/take.h): the block's values against plain indexing for any dtype,
// gradients against central differences (zeros outside the block), and refused ranges.
#include "ops/take.h"

#include <gtest/gtest.h>

#include "grad_check_util.h"
#include "support/expect.h"

namespace unillm::optest {
namespace {

TEST(Take, RowsAndColumnsCopyTheBlock) {
  testing::init_cpu();
  for (DType dt : {DType::f32, DType::bf16, DType::f64}) {
    const Tensor x = randn({6, 5}, dt, 3);
    const Tensor r = ops::take_rows(x, {{1, 3}, {4, 6}});
    ASSERT_EQ(r.shape(), (Shape{4, 5}));
    EXPECT_EQ(r.dtype(), dt);
    const int64_t src[] = {1, 2, 4, 5};
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t j = 0; j < 5; ++j) EXPECT_EQ(r.item({i, j}), x.item({src[i], j})) << dtype_name(dt);
    const Tensor c = ops::take_cols(x, 2, 4);
    ASSERT_EQ(c.shape(), (Shape{6, 2}));
    for (int64_t i = 0; i < 6; ++i)
      for (int64_t j = 0; j < 2; ++j) EXPECT_EQ(c.item({i, j}), x.item({i, j + 2}));
  }
  const Tensor b = randn({6}, DType::f32, 4);  // a bias: 1-D rows
  const Tensor rb = ops::take_rows(b, {{0, 1}, {3, 5}});
  ASSERT_EQ(rb.shape(), (Shape{3}));
  EXPECT_EQ(rb.item({2}), b.item({4}));
  EXPECT_EQ(ops::take_rows(b, {{2, 2}}).numel(), 0);
}

TEST(Take, GradientsAreTheBlockInZeros) {
  testing::init_cpu();
  Tensor x = leaf({5, 4}, DType::f64, 7);
  check_grads([&] { return ops::take_rows(x, {{0, 2}, {3, 4}}); }, {x}, 8);
  Tensor y = leaf({3, 6}, DType::f64, 9);
  check_grads([&] { return ops::take_cols(y, 1, 4); }, {y}, 10);
  Tensor b = leaf({6}, DType::f64, 11);
  check_grads([&] { return ops::take_rows(b, {{2, 4}}); }, {b}, 12);
  // A low-precision weight's gradient comes in f32 (as linear's) and stays f32.
  Tensor w = leaf({4, 3}, DType::f32, 13);
  Tensor out = ops::take_rows(w, {{1, 3}});
  autograd::backward(out, Tensor::from_vector(std::vector<float>(6, 1.0f), {2, 3}));
  const std::vector<double> g = doubles(w.grad());
  EXPECT_EQ(g, (std::vector<double>{0, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0, 0}));
}

TEST(Take, RefusesRangesOutsideTheMatrix) {
  testing::init_cpu();
  const Tensor x = randn({4, 3}, DType::f32, 1);
  using testing::expect_throw_with;
  expect_throw_with<ShapeError>([&] { ops::take_rows(x, {{2, 5}}); }, "[take_rows] rows [2, 5) of 4");
  expect_throw_with<ShapeError>([&] { ops::take_cols(x, 1, 4); }, "[take_cols] columns [1, 4) of 3");
  expect_throw_with<ShapeError>([&] { ops::take_rows(randn({2, 2, 2}, DType::f32, 2), {{0, 1}}); }, "1-D or 2-D");
}

}  // namespace
}  // namespace unillm::optest
