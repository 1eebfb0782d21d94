// Gradient buckets (src/train/grad_buckets.h) against a recording process group: the buckets cut
// the arena into disjoint ranges that cover it once; during a real backward (with and without
// recompute) the layers' buckets start while backward runs, top layers first, and finish() starts
// the rest in the same fixed order — also when the first layer is never reported (LoRA: the
// frozen embedding's output needs no gradient).
#include <gtest/gtest.h>

#include <fstream>

#include "autograd/engine.h"
#include "core/rng.h"
#include "models/causal_lm.h"
#include "models/save.h"
#include "support/expect.h"
#include "support/run_cli.h"
#include "train/arena.h"
#include "tiny_llama_util.h"
#include "train/grad_buckets.h"

namespace unillm::train {
namespace {

// Records each allreduce as the arena range it covers and doubles it (two identical processes).
class RecordingGroup : public dist::ProcessGroup {
 public:
  explicit RecordingGroup(const ParamArena& a) : base_(static_cast<const float*>(a.grad_tensor().raw_data())) {}
  struct Done : dist::Work {
    void wait() override {}
  };
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::unique_ptr<dist::Work> allreduce_async(Tensor& t, dist::ReduceOp) override {
    const int64_t lo = static_cast<const float*>(t.raw_data()) - base_;
    calls.emplace_back(lo, lo + t.numel());
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] *= 2;
    return std::make_unique<Done>();
  }
  std::unique_ptr<dist::Work> reduce_scatter_async(const Tensor&, Tensor&, dist::ReduceOp) override { throw 1; }
  std::unique_ptr<dist::Work> allgather_async(const Tensor&, Tensor&) override { throw 1; }
  void broadcast(Tensor&, int) override { throw 1; }
  void send(const Tensor&, int, int) override { throw 1; }
  std::unique_ptr<dist::Work> send_async(const Tensor&, int, int) override { throw 1; }
  void recv(Tensor&, int, int) override { throw 1; }
  void barrier() override {}
  std::unique_ptr<dist::ProcessGroup> split(int, int) override { throw 1; }
  std::vector<std::pair<int64_t, int64_t>> calls;

 private:
  const float* base_;
};

// Full: every weight trains; LoRA: only the adapter.
std::unique_ptr<models::CausalLM> tiny(bool lora) {
  auto m = testing::tiny_llama("grad_buckets", 3, lora);
  if (!lora)
    for (auto& p : m->module().parameters()) p.tensor->set_requires_grad(true);
  return m;
}

models::TrainBatch batch() {
  models::TrainBatch b;
  b.input_ids = Tensor::from_ints({3, 7, 1, 9, 4, 2, 8, 5}, {2, 4});
  b.labels = b.input_ids;
  b.position_ids = Tensor::from_ints({0, 1, 2, 3, 0, 1, 2, 3}, {2, 4});
  return b;
}

TEST(GradBuckets, LayerOfParameterNames) {
  EXPECT_EQ(layer_of("model.layers.7.mlp.down_proj.weight"), 7);
  EXPECT_EQ(layer_of("base_model.model.model.layers.12.self_attn.q_proj.lora_A.weight"), 12);
  EXPECT_EQ(layer_of("model.embed_tokens.weight"), -1);
  EXPECT_EQ(layer_of("model.norm.weight"), -1);
  EXPECT_EQ(layer_of("v_head.summary.weight"), -1);
  EXPECT_EQ(layer_of("model.sublayers.3.x"), -1);
}

TEST(GradBuckets, RangesCoverTheArenaOnceTopLayersFirst) {
  auto m = tiny(false);
  ParamArena arena(m->module());
  RecordingGroup g(arena);
  GradBuckets one_per_layer(arena, g, 1);  // a cap below any layer: one bucket each
  const auto r = one_per_layer.ranges();
  ASSERT_EQ(r.size(), 5u);  // layers 2, 1, 0; final norm + lm_head; embedding
  EXPECT_EQ(r[3].second, arena.numel());
  EXPECT_EQ(r[4].first, 0);
  EXPECT_EQ(r[0].second, r[3].first);  // layer 2 ends where the final norm begins
  EXPECT_EQ(r[1].second, r[0].first);
  EXPECT_EQ(r[2].second, r[1].first);
  EXPECT_EQ(r[4].second, r[2].first);
  GradBuckets merged(arena, g, 1e9);  // every layer in one bucket
  const auto rm = merged.ranges();
  ASSERT_EQ(rm.size(), 3u);
  EXPECT_EQ(rm[0], std::make_pair(r[2].first, r[0].second));
  EXPECT_NE(merged.describe().find("3 buckets (1 over decoder layers"), std::string::npos) << merged.describe();
}

void backward_through(models::CausalLM& m, GradBuckets& b, bool recompute) {
  b.arm();
  auto out = m.loss(batch(), recompute);
  autograd::backward(out.loss_sum);
}

TEST(GradBuckets, LayersStartDuringBackwardAndTheRestInFinish) {
  for (bool recompute : {false, true}) {
    auto m = tiny(false), plain = tiny(false);  // the same weights; plain's backward is not bucketed
    ParamArena arena(m->module()), plain_arena(plain->module());
    RecordingGroup g(arena);
    GradBuckets b(arena, g, 1);
    m->set_layer_backward_hook([&](int64_t l) { b.layer_done(l); });
    backward_through(*m, b, recompute);
    const auto all = b.ranges();
    const std::vector<std::pair<int64_t, int64_t>> layers(all.begin(), all.begin() + 3);
    EXPECT_EQ(g.calls, layers) << "recompute " << recompute;  // the three layers' buckets, before finish
    b.finish();
    EXPECT_EQ(g.calls, b.ranges());
    // Every element summed exactly once (doubled), and only after backward had written it.
    autograd::backward(plain->loss(batch(), recompute).loss_sum);
    const std::vector<float> got = arena.grad_tensor().to_float_vector(),
                             want = plain_arena.grad_tensor().to_float_vector();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], 2 * want[i]) << i;
    // Not armed (an earlier micro-batch of the step): nothing starts during backward.
    g.calls.clear();
    auto out = m->loss(batch(), recompute);
    autograd::backward(out.loss_sum);
    EXPECT_TRUE(g.calls.empty());
  }
}

TEST(GradBuckets, AnUnreportedFirstLayerStartsInItsPlace) {
  auto m = tiny(true);  // LoRA: only the adapters train, inside the layers
  ParamArena arena(m->module());
  RecordingGroup g(arena);
  GradBuckets b(arena, g, 1);
  ASSERT_EQ(b.ranges().size(), 3u);  // nothing outside the layers
  m->set_layer_backward_hook([&](int64_t l) { b.layer_done(l); });
  backward_through(*m, b, true);
  ASSERT_EQ(g.calls.size(), 2u);  // layers 2 and 1; layer 0's input needs no gradient
  b.finish();
  EXPECT_EQ(g.calls, b.ranges());
}

}  // namespace
}  // namespace unillm::train
