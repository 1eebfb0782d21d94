// The backward engine on small hand-made nodes (f64 scale/add): diamonds sum gradients, leaves
// accumulate across backward calls, no-grad records nothing, retain_graph, released saved tensors,
// and a backward() called from inside a node's backward (per-layer recompute).
#include <gtest/gtest.h>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "support/expect.h"

namespace unillm {
namespace {

using autograd::Node;

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override { testing::init_cpu(); }
};
using autograd::SavedTensor;

Tensor vec(std::vector<float> v) {
  return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}, DType::f64);
}
std::vector<double> values(const Tensor& t) {
  std::vector<double> out;
  for (int64_t i = 0; i < t.numel(); ++i) out.push_back(t.item_flat(i));
  return out;
}

// out = x·k; saves x (only to exercise SavedTensor) although the gradient does not need it.
class ScaleNode : public Node {
 public:
  ScaleNode(const Tensor& x, double k) : x_(x), k_(k) {}
  std::string name() const override { return "ScaleNode"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    x_.get();
    Tensor d = g[0].clone();
    for (int64_t i = 0; i < d.numel(); ++i) d.data<double>()[i] *= k_;
    return {d};
  }
  void release_saved() override { x_.release(); }

 private:
  SavedTensor x_;
  double k_;
};

Tensor scale(const Tensor& x, double k) {
  Tensor out = x.clone();
  for (int64_t i = 0; i < out.numel(); ++i) out.data<double>()[i] *= k;
  if (autograd::needs_grad({x})) autograd::record(std::make_shared<ScaleNode>(x, k), {x}, {&out});
  return out;
}

// out = a ∘ b (saves both).
class MulNode : public Node {
 public:
  MulNode(const Tensor& a, const Tensor& b) : a_(a), b_(b) {}
  std::string name() const override { return "MulNode"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    Tensor da = g[0].clone(), db = g[0].clone();
    for (int64_t i = 0; i < da.numel(); ++i) {
      da.data<double>()[i] *= b_.get().item_flat(i);
      db.data<double>()[i] *= a_.get().item_flat(i);
    }
    return {da, db};
  }
  void release_saved() override {
    a_.release();
    b_.release();
  }

 private:
  SavedTensor a_, b_;
};

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = a.clone();
  for (int64_t i = 0; i < out.numel(); ++i) out.data<double>()[i] *= b.item_flat(i);
  if (autograd::needs_grad({a, b})) autograd::record(std::make_shared<MulNode>(a, b), {a, b}, {&out});
  return out;
}

// Sums two tensors (no saved state).
class AddNode : public Node {
 public:
  std::string name() const override { return "AddNode"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override { return {g[0], g[0]}; }
};

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = a.clone();
  for (int64_t i = 0; i < out.numel(); ++i) out.data<double>()[i] += b.item_flat(i);
  if (autograd::needs_grad({a, b})) autograd::record(std::make_shared<AddNode>(), {a, b}, {&out});
  return out;
}

TEST_F(EngineTest, DiamondSumsGradients) {
  Tensor x = vec({1, 2}).set_requires_grad(true);
  Tensor y = scale(x, 2);  // reaches c through two paths
  Tensor c = add(scale(y, 3), scale(y, 5));
  autograd::backward(c, vec({1, 10}));
  EXPECT_EQ(values(x.grad()), (std::vector<double>{16, 160}));
  // The same leaf twice in one op: x·x.
  Tensor z = vec({3}).set_requires_grad(true);
  autograd::backward(mul(z, z));
  EXPECT_EQ(values(z.grad()), (std::vector<double>{6}));
}

TEST_F(EngineTest, LeavesAccumulateAcrossBackwardCalls) {
  Tensor x = vec({1, 2}).set_requires_grad(true);
  autograd::backward(scale(x, 3), vec({1, 1}));
  autograd::backward(scale(x, 4), vec({1, 2}));
  EXPECT_EQ(values(x.grad()), (std::vector<double>{7, 11}));
}

TEST_F(EngineTest, NoGradGuardRecordsNothing) {
  Tensor x = vec({1}).set_requires_grad(true);
  {
    autograd::NoGradGuard no_grad;
    EXPECT_FALSE(autograd::grad_enabled());
    Tensor y = scale(x, 2);
    EXPECT_EQ(y.grad_fn(), nullptr);
    EXPECT_FALSE(y.requires_grad());
  }
  EXPECT_TRUE(autograd::grad_enabled());
  EXPECT_NE(scale(x, 2).grad_fn(), nullptr);
}

TEST_F(EngineTest, RetainGraphAllowsASecondBackward) {
  Tensor x = vec({1, 2}).set_requires_grad(true);
  Tensor y = mul(scale(x, 2), x);  // 2x², dy/dx = 4x
  autograd::backward(y, vec({1, 1}), {.retain_graph = true});
  autograd::backward(y, vec({1, 1}));
  EXPECT_EQ(values(x.grad()), (std::vector<double>{8, 16}));
  // The graph's saved tensors are released now.
  try {
    autograd::backward(y, vec({1, 1}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("released"), std::string::npos) << e.what();
  }
}

TEST_F(EngineTest, SavedTensorAfterReleaseThrowsAndIsDetached) {
  Tensor x = vec({1}).set_requires_grad(true);
  SavedTensor s(x);
  EXPECT_FALSE(s.get().requires_grad());  // kept detached: no cycle through an output's grad_fn
  EXPECT_EQ(s.get().raw_data(), x.raw_data());
  s.release();
  EXPECT_THROW(s.get(), Error);
}

TEST_F(EngineTest, DetachSharesStorageWithoutAutograd) {
  Tensor x = vec({1, 2}).set_requires_grad(true);
  Tensor y = scale(x, 2);
  Tensor d = y.detach();
  EXPECT_EQ(d.grad_fn(), nullptr);
  EXPECT_FALSE(d.requires_grad());
  EXPECT_EQ(d.raw_data(), y.raw_data());
  EXPECT_NE(y.grad_fn(), nullptr);
}

// A "layer" out = (h ∘ p)·3 recomputed in backward: the forward runs without a graph and saves
// only its input; backward re-runs it with grad on a detached input and backpropagates through
// that sub-graph from inside the outer backward.
Tensor layer(const Tensor& h, const Tensor& p) { return scale(mul(h, p), 3); }

class CheckpointNode : public Node {
 public:
  CheckpointNode(const Tensor& h, const Tensor& p) : h_(h), p_(p) {}
  std::string name() const override { return "CheckpointNode"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    autograd::GradModeGuard grad_on(true);
    Tensor h = h_.get().detach().clone().set_requires_grad(true);
    Tensor out = layer(h, p_);
    autograd::backward(out, g[0]);  // p's .grad accumulates here (it is the caller's leaf)
    return {h.grad(), Tensor()};
  }
  void release_saved() override { h_.release(); }

 private:
  SavedTensor h_;
  Tensor p_;  // the parameter itself (with its autograd meta), not a saved copy
};

Tensor checkpointed_layer(const Tensor& h, const Tensor& p) {
  Tensor out;
  {
    autograd::NoGradGuard no_grad;
    out = layer(h, p);
  }
  if (autograd::needs_grad({h, p}))
    autograd::record(std::make_shared<CheckpointNode>(h, p), {h, p}, {&out});
  return out;
}

TEST_F(EngineTest, NestedBackwardForPerLayerRecompute) {
  auto run = [](bool checkpoint, Tensor& x, Tensor& p) {
    Tensor h = scale(x, 2);
    Tensor out = checkpoint ? checkpointed_layer(h, p) : layer(h, p);
    autograd::backward(scale(out, 0.5), vec({1, 2, 3}));
  };
  Tensor x1 = vec({1, -2, 3}).set_requires_grad(true), p1 = vec({4, 5, 6}).set_requires_grad(true);
  Tensor x2 = vec({1, -2, 3}).set_requires_grad(true), p2 = vec({4, 5, 6}).set_requires_grad(true);
  run(false, x1, p1);
  run(true, x2, p2);
  EXPECT_EQ(values(x2.grad()), values(x1.grad()));
  EXPECT_EQ(values(p2.grad()), values(p1.grad()));
  EXPECT_EQ(values(x1.grad()), (std::vector<double>{12, 30, 54}));  // 0.5·3·2·p·g
  EXPECT_TRUE(autograd::grad_enabled());
}

}  // namespace
}  // namespace unillm
