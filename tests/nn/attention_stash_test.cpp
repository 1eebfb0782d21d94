// nn::AttentionStash: under recompute the attention segment's re-run takes the attention's out and
// lse from the forward instead of running the kernel again. Gradients of x and of every weight
// equal those of the plain graph and of a re-run without a stash bit for bit (f32, GQA, packed
// segments); the stash is emptied by the re-run; with packed (bf16) saves it is left unused; and
// causal_attention_replay refuses an out/lse that does not belong to q.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "core/rng.h"
#include "nn/attention.h"
#include "nn/low_precision_saves.h"
#include "nn/recompute.h"
#include "ops/causal_attention.h"
#include "ops/elementwise.h"
#include "ops/rope.h"
#include "support/expect.h"

namespace unillm::nn {
namespace {

constexpr int64_t kB = 2, kT = 11, kC = 24, kH = 4, kHkv = 2, kD = 6;

Tensor randn(const Shape& shape, uint64_t seed, double scale = 1.0) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (auto& e : v) e = static_cast<float>(rng.normal() * scale);
  return Tensor::from_vector(v, shape, DType::f32);
}

std::vector<float> values(const Tensor& t) {
  Tensor c = t.contiguous();
  return std::vector<float>(c.data<float>(), c.data<float>() + c.numel());
}

ops::RopeConfig rope() {
  ops::RopeConfig c;
  c.rot_dim = kD;
  return c;
}

struct StashCase {
  Attention attn{AttentionConfig{kC, kH, kHkv, kD, false, false, false, 1e-6, DType::f32, Device{}}};
  std::vector<float> inv_freq = ops::rope_inv_freq(rope());
  AttentionInputs in;
  StashCase() {
    uint64_t seed = 10;
    for (auto& p : attn.parameters()) {
      *p.tensor = randn(p.tensor->shape(), seed++, 0.3);
      p.tensor->set_requires_grad(true);
    }
    std::vector<int32_t> pos, seg;
    for (int64_t b = 0; b < kB; ++b)
      for (int64_t t = 0; t < kT; ++t) {  // two packed samples per row: 4 and 7 tokens
        pos.push_back(static_cast<int32_t>(t < 4 ? t : t - 4));
        seg.push_back(t < 4 ? 1 : 2);
      }
    in.positions = Tensor::from_ints(pos, {kB * kT});
    in.segment_ids = Tensor::from_ints(seg, {kB, kT});
    in.rows = kB;
    in.tokens = kT;
    in.inv_freq = &inv_freq;
  }
  // x's gradient followed by every weight's, after backward from a fixed upstream gradient.
  // mode 0: plain graph; 1: recompute without a stash; 2: recompute with one.
  std::vector<float> grads(int mode, std::shared_ptr<AttentionStash> stash = nullptr) {
    for (auto& p : attn.parameters()) p.tensor->autograd_meta().grad.reset();
    Tensor x = randn({kB * kT, kC}, 1);
    x.set_requires_grad(true);
    if (mode == 2 && !stash) stash = std::make_shared<AttentionStash>();
    SegmentFn fn = [this, stash](const Tensor& a, ops::OutputUse use) {
      return ops::add(a, attn.forward(a, in, {}, use, stash.get()));
    };
    Tensor y = mode == 0 ? fn(x, ops::OutputUse::kValue) : recompute(fn, x, true);
    if (mode == 2) {
      EXPECT_EQ(stash->out.saved(), !autograd::saved_tensor_hooks());
    }
    autograd::backward(y, randn({kB * kT, kC}, 2));
    if (mode == 2) {
      EXPECT_FALSE(stash->out.saved()) << "the re-run empties the stash";
    }
    std::vector<float> g = values(x.grad());
    for (auto& p : attn.parameters()) {
      auto v = values(p.tensor->grad());
      g.insert(g.end(), v.begin(), v.end());
    }
    return g;
  }
};

TEST(AttentionStash, ReplayGivesTheGradientsOfTheFullReRun) {
  testing::init_cpu();
  StashCase s;
  const auto plain = s.grads(0), rerun = s.grads(1), replay = s.grads(2);
  ASSERT_EQ(plain.size(), replay.size());
  EXPECT_EQ(rerun, plain);
  EXPECT_EQ(replay, plain);
}

TEST(AttentionStash, UnusedWithPackedSaves) {
  testing::init_cpu();
  StashCase s;
  autograd::SavedTensorHooksGuard bf16(low_precision_save_hooks(DType::bf16));
  auto stash = std::make_shared<AttentionStash>();
  const auto rerun = s.grads(1), with_stash = s.grads(2, stash);
  EXPECT_EQ(with_stash, rerun);  // the re-run recomputed the attention from its own q, k, v
}

TEST(AttentionStash, ReplayRejectsForeignOutputs) {
  testing::init_cpu();
  Tensor q = randn({1, 3, 2, 4}, 1), k = randn({1, 3, 1, 4}, 2), v = randn({1, 3, 1, 4}, 3);
  Tensor lse;
  Tensor out = ops::causal_attention(q, k, v, Tensor(), 0.5f, &lse);
  EXPECT_EQ(lse.shape(), (Shape{1, 3, 2}));
  EXPECT_THROW(ops::causal_attention_replay(q, k, v, Tensor(), 0.5f, lse, lse), ShapeError);
  EXPECT_THROW(ops::causal_attention_replay(q, k, v, Tensor(), 0.5f, out, out), ShapeError);
  Tensor again = ops::causal_attention_replay(q, k, v, Tensor(), 0.5f, out, lse);
  EXPECT_EQ(values(again), values(out));
}

}  // namespace
}  // namespace unillm::nn
