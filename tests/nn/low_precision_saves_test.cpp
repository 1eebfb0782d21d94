// Saved-tensor hooks and nn::LowPrecisionSaves: activations are packed to bf16 once (a tensor
// saved by two ops shares one packed copy), unpacked once per saved tensor, weights and non-f32
// tensors are kept as they are, the recompute node re-installs the forward's hooks for its
// re-run, and gradients through a small residual network stay within bf16 rounding of f32 ones.
#include "nn/low_precision_saves.h"

#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <vector>

#include "autograd/engine.h"
#include "autograd/node.h"
#include "core/rng.h"
#include "nn/recompute.h"
#include "ops/elementwise.h"
#include "ops/linear.h"
#include "ops/rms_norm.h"
#include "ops/swiglu.h"
#include "support/expect.h"

namespace unillm::nn {
namespace {

using autograd::SavedTensor;

Tensor randn(const Shape& shape, uint64_t seed, bool grad, double scale = 1.0) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (auto& e : v) e = static_cast<float>(rng.normal() * scale);
  Tensor t = Tensor::from_vector(v, shape, DType::f32);
  if (grad) t.set_requires_grad(true);
  return t;
}

// Norm gains 1 + N(0, 0.1²), trainable.
Tensor gain(int64_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& e : v) e = static_cast<float>(1.0 + 0.1 * rng.normal());
  Tensor t = Tensor::from_vector(v, {n});
  t.set_requires_grad(true);
  return t;
}

TEST(SavedTensorHooks, PackOnSaveUnpackOnceOnRead) {
  testing::init_cpu();
  int packs = 0, unpacks = 0;
  auto hooks = std::make_shared<autograd::SavedTensorHooks>();
  hooks->pack = [&](const Tensor& t) { ++packs; return t.clone(); };
  hooks->unpack = [&](const Tensor& t) { ++unpacks; return t; };
  Tensor x = randn({3, 4}, 1, false);
  SavedTensor weight, act;
  {
    autograd::SavedTensorHooksGuard g(hooks);
    weight = SavedTensor(x);  // weights are never packed
    act = SavedTensor::activation(x);
  }
  EXPECT_EQ(packs, 1);
  EXPECT_EQ(weight.get().raw_data(), x.raw_data());
  EXPECT_NE(act.get().raw_data(), x.raw_data());
  act.get();
  EXPECT_EQ(unpacks, 1);  // kept until release
  act.release();
  EXPECT_THROW(act.get(), Error);
  // Without hooks activation() keeps the tensor itself.
  EXPECT_EQ(SavedTensor::activation(x).get().raw_data(), x.raw_data());
}

TEST(LowPrecisionSaves, PacksToBf16OnceAndKeepsOtherDtypes) {
  testing::init_cpu();
  Tensor x = randn({5, 7}, 2, false);
  LowPrecisionSaves bf16(DType::bf16);
  SavedTensor a = SavedTensor::activation(x), b = SavedTensor::activation(x);
  SavedTensor other = SavedTensor::activation(randn({5, 7}, 3, false));  // same shape, other data
  const Tensor& ga = a.get();
  ASSERT_EQ(ga.dtype(), DType::f32);
  for (int64_t i = 0; i < x.numel(); ++i)
    ASSERT_EQ(ga.data<float>()[i], bf16_to_f32(f32_to_bf16(x.data<float>()[i]))) << i;
  EXPECT_EQ(b.get().data<float>()[3], ga.data<float>()[3]);
  EXPECT_NE(other.get().data<float>()[3], ga.data<float>()[3]);
  // f64 and integer tensors are not activations to shrink.
  Tensor d = Tensor::from_vector({1.0f / 3.0f}, {1}, DType::f64);
  EXPECT_EQ(SavedTensor::activation(d).get().raw_data(), d.raw_data());
}

TEST(LowPrecisionSaves, ASharedActivationIsPackedOnce) {
  testing::init_cpu();
  size_t before = 0, after_one = 0, after_two = 0;
  Tensor x = randn({256, 64}, 4, false);
  auto& alloc = backend_for(Device{}).allocator(0);
  LowPrecisionSaves bf16(DType::bf16);
  before = alloc.bytes_in_use();
  SavedTensor a = SavedTensor::activation(x);
  after_one = alloc.bytes_in_use();
  SavedTensor b = SavedTensor::activation(x);
  after_two = alloc.bytes_in_use();
  EXPECT_EQ(after_one - before, size_t{256 * 64 * 2});  // one bf16 copy
  EXPECT_EQ(after_two, after_one);              // the second save reuses it
}

// y = x + W2·swiglu(W1·rms_norm(x)): gradients with bf16 saves vs f32 saves, recompute off and on.
TEST(LowPrecisionSaves, GradientsStayWithinBf16RoundingOfF32) {
  testing::init_cpu();
  for (bool rc : {false, true}) {
    std::vector<std::vector<float>> grads[2];
    for (int run = 0; run < 2; ++run) {
      Tensor x = randn({24, 32}, 5, true), g = gain(32, 6);
      Tensor w1 = randn({80, 32}, 7, true, 0.2), w2 = randn({32, 40}, 8, true, 0.2);
      SegmentFn fn = [&](const Tensor& in, ops::OutputUse use) {
        Tensor h = ops::rms_norm(in, g, 1e-6f);
        return ops::add(in, ops::linear(ops::swiglu(ops::linear(h, w1)), w2, Tensor(), use));
      };
      {
        std::optional<LowPrecisionSaves> low;
        if (run == 1) low.emplace(DType::bf16);
        Tensor y = rc ? recompute(fn, x, true) : fn(x, ops::OutputUse::kValue);
        autograd::backward(y, randn({24, 32}, 9, false));
      }
      for (const Tensor& t : {x, g, w1, w2}) {
        Tensor c = t.grad().contiguous();
        grads[run].emplace_back(c.data<float>(), c.data<float>() + c.numel());
      }
    }
    for (size_t k = 0; k < grads[0].size(); ++k) {
      double num = 0, den = 0;
      for (size_t i = 0; i < grads[0][k].size(); ++i) {
        const double d = grads[1][k][i] - grads[0][k][i];
        num += d * d;
        den += static_cast<double>(grads[0][k][i]) * grads[0][k][i];
      }
      const double rel = std::sqrt(num / den);
      EXPECT_LT(rel, 1e-2) << "tensor " << k << " recompute " << rc;  // bf16 keeps 8 bits
      EXPECT_GT(rel, 1e-5) << "tensor " << k << " recompute " << rc << ": nothing was rounded?";
    }
  }
}

}  // namespace
}  // namespace unillm::nn
