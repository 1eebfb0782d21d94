// Packed SFT rows (data/packing.h) through the model: with neat packing (segment ids, positions
// restarting per sample) the gradients of a packed row equal the summed gradients of its samples
// run one by one — for full fine-tuning and for a LoRA adapter, with and without recompute.
// (Plain packing is an ordinary row; tests/reference checks such rows against PyTorch.)
// Also: recompute with only the MLPs trainable (freeze-style) gives the plain graph's gradients
// (the attention segments then record no recompute node).
#include <cmath>

#include "autograd/engine.h"
#include "lora_test_util.h"
#include "nn/lora.h"

namespace unillm {
namespace {

struct Sample {
  std::vector<int32_t> ids, labels;
};

// Two SFT samples: a prompt (labels -100) then a response.
std::vector<Sample> samples() {
  return {{{1, 9, 14, 3, 22, 40, 7}, {-100, -100, -100, 3, 22, 40, 7}},
          {{1, 33, 5, 18, 2}, {-100, -100, 5, 18, 2}}};
}

models::TrainBatch row_batch(const std::vector<int32_t>& ids, const std::vector<int32_t>& labels,
                             const std::vector<int32_t>& pos, const std::vector<int32_t>& seg) {
  const auto t = static_cast<int64_t>(ids.size());
  models::TrainBatch b;
  b.input_ids = Tensor::from_ints(ids, {1, t});
  b.labels = Tensor::from_ints(labels, {1, t});
  b.position_ids = Tensor::from_ints(pos, {1, t});
  if (!seg.empty()) b.segment_ids = Tensor::from_ints(seg, {1, t});
  return b;
}

// Gradients of Σ loss_sum over the batches, by trainable tensor (HF / adapter name).
std::map<std::string, std::vector<float>> grads_of(models::CausalLM& m,
                                                   const std::vector<models::TrainBatch>& bs,
                                                   bool recompute) {
  for (auto& p : m.module().parameters())
    if (p.tensor->grad().defined()) p.tensor->set_grad(Tensor());
  for (const auto& b : bs) {
    auto out = m.loss(b, recompute);
    autograd::backward(out.loss_sum, Tensor::from_vector({1.0f}, {}));
  }
  std::map<std::string, std::vector<float>> g;
  for (auto& p : m.module().parameters())
    if (p.tensor->requires_grad() && p.tensor->grad().defined())
      g[p.hf_names.front()] = p.tensor->grad().contiguous().to_float_vector();
  return g;
}

void expect_same_grads(const std::map<std::string, std::vector<float>>& a,
                       const std::map<std::string, std::vector<float>>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, ga] : a) {
    const auto& gb = b.at(name);
    double diff = 0, norm = 0;
    for (size_t i = 0; i < ga.size(); ++i) {
      diff += (ga[i] - gb[i]) * double(ga[i] - gb[i]);
      norm += double(gb[i]) * gb[i];
    }
    EXPECT_LE(std::sqrt(diff), 1e-5 * std::sqrt(norm) + 1e-7) << name;
  }
}

void check_neat_equals_separate(models::CausalLM& m, bool recompute) {
  std::vector<int32_t> ids, labels, pos, seg;
  std::vector<models::TrainBatch> separate;
  int32_t s_id = 1;
  for (const auto& s : samples()) {
    std::vector<int32_t> p(s.ids.size());
    for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<int32_t>(i);
    separate.push_back(row_batch(s.ids, s.labels, p, {}));
    ids.insert(ids.end(), s.ids.begin(), s.ids.end());
    labels.insert(labels.end(), s.labels.begin(), s.labels.end());
    pos.insert(pos.end(), p.begin(), p.end());
    seg.insert(seg.end(), s.ids.size(), s_id++);
  }
  auto packed = grads_of(m, {row_batch(ids, labels, pos, seg)}, recompute);
  auto one_by_one = grads_of(m, separate, recompute);
  ASSERT_FALSE(packed.empty());
  expect_same_grads(packed, one_by_one);
}

class PackingGrad : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { testing::init_cpu(); }
};

TEST_P(PackingGrad, NeatPackedRowEqualsSamplesOneByOneFull) {
  auto m = lora_test::tiny_model("llama");
  for (auto& p : m->module().parameters()) p.tensor->set_requires_grad(true);
  check_neat_equals_separate(*m, GetParam());
}

TEST_P(PackingGrad, NeatPackedRowEqualsSamplesOneByOneLora) {
  auto m = lora_test::tiny_model("qwen2");
  nn::LoraConfig c;
  c.rank = 4;
  c.alpha = 8;
  c.target_modules = {"all"};
  Rng rng(5);
  m->add_lora("default", c, rng);
  lora_test::randomize_b(*m, "default", 6);
  m->set_active_adapters({"default"});
  check_neat_equals_separate(*m, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Recompute, PackingGrad, ::testing::Bool());

TEST(RecomputeGrad, OnlyMlpTrainableMatchesPlain) {
  testing::init_cpu();
  auto m = lora_test::tiny_model("llama");
  for (auto& p : m->module().parameters())
    p.tensor->set_requires_grad(p.hf_names.front().find(".mlp.") != std::string::npos);
  const models::TrainBatch b = lora_test::train_batch();
  auto plain = grads_of(*m, {b}, false);
  ASSERT_FALSE(plain.empty());
  expect_same_grads(grads_of(*m, {b}, true), plain);
}

}  // namespace
}  // namespace unillm
