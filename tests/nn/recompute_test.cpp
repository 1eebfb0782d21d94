// nn::recompute: the forward runs the segment once with kValue, backward re-runs it once with
// kGradOnly, and the gradients of x and the parameters equal those of the plain graph bit for bit
// (a residual segment whose last projection skips its GEMM in the re-run).
#include "nn/recompute.h"

#include <gtest/gtest.h>

#include <vector>

#include "autograd/engine.h"
#include "core/rng.h"
#include "ops/elementwise.h"
#include "ops/linear.h"
#include "support/expect.h"

namespace unillm::nn {
namespace {

Tensor randn(const Shape& shape, uint64_t seed, bool grad) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (auto& e : v) e = static_cast<float>(rng.normal());
  Tensor t = Tensor::from_vector(v, shape, DType::f32);
  if (grad) t.set_requires_grad(true);
  return t;
}

std::vector<float> values(const Tensor& t) {
  Tensor c = t.contiguous();
  return std::vector<float>(c.data<float>(), c.data<float>() + c.numel());
}

TEST(Recompute, ReplaysGraphOnlyWithTheSameGradients) {
  testing::init_cpu();
  std::vector<float> grads[2];
  for (int run = 0; run < 2; ++run) {
    Tensor x0 = randn({5, 8}, 1, true);  // [N, C]
    Tensor w1 = randn({12, 8}, 2, true), w2 = randn({8, 12}, 3, true);
    std::vector<ops::OutputUse> uses;
    SegmentFn fn = [&](const Tensor& x, ops::OutputUse use) {  // x + w2·(w1·x), C → F → C
      uses.push_back(use);
      return ops::add(x, ops::linear(ops::linear(x, w1), w2, Tensor(), use));
    };
    Tensor x = ops::mul(x0, x0);  // x has history: its gradient flows on to x0
    Tensor y = run == 0 ? fn(x, ops::OutputUse::kValue) : recompute(fn, x, true);
    if (run == 1) {
      EXPECT_EQ(uses, std::vector<ops::OutputUse>{ops::OutputUse::kValue});
    }
    autograd::backward(y, randn({5, 8}, 4, false));
    if (run == 1) {
      EXPECT_EQ(uses, (std::vector<ops::OutputUse>{ops::OutputUse::kValue,
                                                   ops::OutputUse::kGradOnly}));
    }
    for (const Tensor& t : {x0, w1, w2}) {
      auto v = values(t.grad());
      grads[run].insert(grads[run].end(), v.begin(), v.end());
    }
  }
  EXPECT_EQ(grads[0], grads[1]);
}

}  // namespace
}  // namespace unillm::nn
