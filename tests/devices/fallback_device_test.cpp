// Every op on the reference device against the same op on the CPU, forward and backward. Where
// the plugin has no kernel the op runs the CPU kernel on host copies (the fallback), so results
// must be bit-identical; a binding an op forgot would hand a device pointer to a CPU kernel,
// which faults on the plugin's guarded memory instead of passing.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "autograd/engine.h"
#include "backends/cpu/register.h"
#include "backends/plugin/plugin_loader.h"
#include "core/registry.h"
#include "core/rng.h"
#include "ops/attention.h"
#include "ops/cast.h"
#include "ops/causal_attention.h"
#include "ops/cross_entropy.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/gather.h"
#include "ops/linear.h"
#include "ops/lora_linear.h"
#include "ops/rms_norm.h"
#include "ops/rope.h"
#include "ops/softmax.h"
#include "ops/swiglu.h"

namespace unillm {
namespace {

Device ref_device() {
  static const Device d = [] {
    cpu::register_cpu_backend();
    plugin::load_plugins(std::string(UNILLM_BINARY_DIR) + "/plugins");
    return parse_device("ref");
  }();
  return d;
}

Tensor random(const Shape& s, uint64_t seed, DType dt = DType::f32) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(shape_numel(s)));
  for (auto& x : v) x = static_cast<float>(rng.uniform_double() * 2 - 1);
  return Tensor::from_vector(v, s, dt);
}

std::vector<float> host(const Tensor& t) { return t.to(Device{}).to_float_vector(); }

// Runs fn on CPU copies and on ref copies of inputs (leaves requiring grad when grads is true),
// backpropagates the sum of the output's elements times a fixed weight, and compares the output
// and every input gradient exactly.
void expect_same(const std::vector<Tensor>& inputs, bool grads,
                 const std::function<Tensor(const std::vector<Tensor>&)>& fn) {
  std::vector<Tensor> outs;
  std::vector<std::vector<Tensor>> leaves(2);
  for (int side = 0; side < 2; ++side) {
    for (const Tensor& t : inputs) {
      Tensor c = side == 0 ? t.clone() : t.to(ref_device());
      if (grads && is_floating(t.dtype())) c.set_requires_grad(true);
      leaves[side].push_back(c);
    }
    Tensor y = fn(leaves[side]);
    EXPECT_EQ(y.device(), side == 0 ? Device{} : ref_device());
    outs.push_back(y);
    if (grads) {
      Tensor g = random(y.shape(), 99, y.dtype());
      autograd::backward(y, side == 0 ? g : g.to(ref_device()));
    }
  }
  EXPECT_EQ(host(outs[0]), host(outs[1])) << "forward differs";
  for (size_t i = 0; grads && i < inputs.size(); ++i) {
    if (!leaves[0][i].requires_grad()) continue;
    ASSERT_EQ(leaves[0][i].grad().defined(), leaves[1][i].grad().defined()) << "input " << i;
    if (leaves[0][i].grad().defined())
      EXPECT_EQ(host(leaves[0][i].grad()), host(leaves[1][i].grad())) << "grad of input " << i;
  }
}

TEST(OpOnDevice, DenseOps) {
  ref_device();
  expect_same({random({6, 16}, 1), random({24, 16}, 2), random({24}, 3)}, true,
              [](const auto& in) { return ops::linear(in[0], in[1], in[2]); });
  expect_same({random({6, 16}, 1), random({24, 16}, 2, DType::bf16)}, false,
              [](const auto& in) { return ops::linear(in[0], in[1]); });
  expect_same({random({5, 32}, 4), random({32}, 5)}, true,
              [](const auto& in) { return ops::rms_norm(in[0], in[1], 1e-5f); });
  expect_same({random({5, 2, 16}, 6), Tensor::from_ints({0, 1, 2, 7, 9}, {5})}, true, [](const auto& in) {
    std::vector<float> f(8);
    for (int i = 0; i < 8; ++i) f[i] = std::pow(10000.0f, -static_cast<float>(i) / 8);
    return ops::rope(in[0], in[1].to(Device{}), f);
  });
  expect_same({random({4, 20}, 7)}, true, [](const auto& in) { return ops::swiglu(in[0]); });
  expect_same({random({4, 20}, 8)}, true, [](const auto& in) { return ops::softmax(in[0]); });
  expect_same({random({4, 20}, 9), random({4, 20}, 10)}, true,
              [](const auto& in) { return ops::mul(ops::add(in[0], in[1]), in[1]); });
  expect_same({random({4, 20}, 11)}, false, [](const auto& in) {
    return ops::cast(ops::cast(in[0], DType::bf16), DType::f32);
  });
}

TEST(OpOnDevice, IndexOps) {
  ref_device();
  expect_same({random({10, 8}, 12)}, true, [](const auto& in) {
    return ops::embedding(Tensor::from_ints({3, 1, 4, 1, 5}, {5}), in[0]);
  });
  expect_same({random({10, 8}, 13)}, true, [](const auto& in) {
    return ops::gather_rows(in[0], Tensor::from_ints({9, 0, 9, 2}, {4}));
  });
}

TEST(OpOnDevice, AttentionAndLoss) {
  ref_device();
  expect_same({random({2, 6, 4, 8}, 14), random({2, 6, 2, 8}, 15), random({2, 6, 2, 8}, 16)}, true,
              [](const auto& in) { return ops::causal_attention(in[0], in[1], in[2], Tensor(), 0.35f); });
  expect_same({random({7, 16}, 17), random({30, 16}, 18)}, true, [](const auto& in) {
    Tensor labels = Tensor::from_ints({1, 5, -100, 29, 0, 3, 3}, {7});
    return ops::linear_cross_entropy(in[0], in[1], labels, 3).loss_sum;
  });
}

TEST(OpOnDevice, LoraLinear) {
  ref_device();
  expect_same({random({5, 16}, 19), random({24, 16}, 20), random({8, 16}, 21), random({24, 4}, 22)},
              true, [](const auto& in) {
                ops::LoraAdapterInput a;
                a.a = in[2];
                a.b = in[3];
                a.parts = {{0, 8, 0}, {16, 8, 8}};
                a.scaling = 0.5;
                return ops::lora_linear(in[0], in[1], Tensor(), {a});
              });
}

TEST(OpOnDevice, FallbackIsReportedOnceAndCanBeRefused) {
  ref_device();
  std::vector<std::string> reports;
  kernel_registry().set_fallback(KernelRegistry::Fallback::warn,
                                 [&](const std::string& s) { reports.push_back(s); });
  Tensor x = random({3, 20}, 23).to(ref_device());
  ops::softmax(x);
  ops::softmax(x);
  EXPECT_LE(reports.size(), 1u);  // reported before, in an earlier test, or once now
  kernel_registry().set_fallback(KernelRegistry::Fallback::error, nullptr);
  EXPECT_THROW(ops::swiglu(x), NotImplemented);
  kernel_registry().set_fallback(KernelRegistry::Fallback::warn, nullptr);
}

}  // namespace
}  // namespace unillm
