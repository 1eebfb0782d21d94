// LoRA on a CausalLM: parameters and names, the active set and per-call override, merging (f32
// and bf16 bases), the arena packing only adapter weights, dropout (reproducible, identical
// under recompute) and configuration errors.
#include <cmath>

#include "autograd/engine.h"
#include "lora_test_util.h"
#include "models/adapter.h"
#include "train/adamw.h"
#include "train/arena.h"

namespace unillm {
namespace {

using lora_test::logits_with;
using lora_test::tiny_model;

nn::LoraConfig qv_config(int64_t r = 4, double alpha = 8) {
  nn::LoraConfig c;
  c.rank = r;
  c.alpha = alpha;
  c.target_modules = {"q_proj", "v_proj"};
  return c;
}

using testing::expect_throw_with;

class LoraModel : public ::testing::Test {
 protected:
  void SetUp() override { testing::init_cpu(); }
};

TEST_F(LoraModel, ParametersNamesAndShapes) {
  auto model = tiny_model("llama");
  const auto base_names = model->named_parameters();
  Rng rng(1);
  model->add_lora("default", qv_config(), rng);
  EXPECT_EQ(model->named_parameters().size(), base_names.size());  // save_pretrained unchanged
  auto named = model->module().named_adapter_parameters("default");
  ASSERT_EQ(named.size(), 8u);  // 2 layers × (q, v) × (A, B)
  EXPECT_EQ(named[0].first, "model.layers.0.self_attn.q_proj.lora_A.default.weight");
  EXPECT_EQ(shape_str(named[0].second.shape()), shape_str({4, 32}));
  EXPECT_EQ(named[1].first, "model.layers.0.self_attn.v_proj.lora_A.default.weight");
  EXPECT_EQ(named[2].first, "model.layers.0.self_attn.q_proj.lora_B.default.weight");
  EXPECT_EQ(shape_str(named[2].second.shape()), shape_str({32, 4}));
  EXPECT_EQ(shape_str(named[3].second.shape()), shape_str({16, 4}));  // v: Hkv·D = 16
  EXPECT_EQ(models::peft_key(named[0].first, "default"),
            "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight");
  // A ~ U(±1/sqrt(in)), B = 0.
  double amax = 0, bmax = 0;
  for (auto& [n, t] : named)
    for (float v : t.contiguous().to_float_vector())
      (n.find("lora_A") != std::string::npos ? amax : bmax) =
          std::max(n.find("lora_A") != std::string::npos ? amax : bmax, std::fabs(double(v)));
  EXPECT_GT(amax, 0.5 / std::sqrt(32.0));
  EXPECT_LE(amax, 1 / std::sqrt(32.0));
  EXPECT_EQ(bmax, 0.0);
  int adapter_refs = 0;
  for (auto& r : model->module().parameters())
    if (!r.adapter.empty()) {
      ++adapter_refs;
      EXPECT_EQ(r.adapter, "default");
      EXPECT_TRUE(r.tensor->requires_grad());
      EXPECT_TRUE(train::decays(r.hf_names.at(0))) << r.hf_names.at(0);
    }
  EXPECT_EQ(adapter_refs, 4);  // one fused A and one fused B per attention module
}

TEST_F(LoraModel, ActiveSetAndPerCallOverride) {
  auto model = tiny_model("llama");
  const Tensor base = model->logits_all(lora_test::prompt());
  Rng rng(1);
  model->add_lora("a", qv_config(), rng);
  nn::LoraConfig all = qv_config(2, 4);
  all.target_modules = {"all"};
  model->add_lora("b", all, rng);
  lora_test::randomize_b(*model, "a", 2);
  lora_test::randomize_b(*model, "b", 3);
  EXPECT_EQ(testing::max_abs_diff(model->logits_all(lora_test::prompt()), base),
            0.0);  // none active
  model->set_active_adapters({"a"});
  const Tensor with_a = model->logits_all(lora_test::prompt());
  EXPECT_GT(testing::max_abs_diff(with_a, base), 1e-3);
  EXPECT_EQ(testing::max_abs_diff(logits_with(*model, std::vector<std::string>{}), base), 0.0);
  EXPECT_EQ(testing::max_abs_diff(logits_with(*model, std::nullopt), with_a), 0.0);
  const Tensor with_ab = logits_with(*model, std::vector<std::string>{"a", "b"});
  EXPECT_GT(testing::max_abs_diff(with_ab, with_a), 1e-3);
  expect_throw_with<ConfigError>([&] { model->set_active_adapters({"c"}); }, "the model has: a, b");
  expect_throw_with<ConfigError>([&] { logits_with(*model, std::vector<std::string>{"zz"}); },
                                 "no adapter 'zz'");
  model->delete_adapter("a");
  EXPECT_TRUE(model->active_adapters().empty());
  EXPECT_EQ(model->module().named_adapter_parameters("a").size(), 0u);
}

TEST_F(LoraModel, MergeMatchesAdapterLogits) {
  for (const char* type : {"llama", "qwen2"})
    for (bool rs : {false, true}) {
      SCOPED_TRACE(std::string(type) + (rs ? " rslora" : ""));
      auto model = tiny_model(type);
      nn::LoraConfig c = qv_config();
      c.target_modules = {"all"};
      c.use_rslora = rs;
      Rng rng(1);
      model->add_lora("default", c, rng);
      lora_test::randomize_b(*model, "default", 4);
      const Tensor adapted = logits_with(*model, std::vector<std::string>{"default"});
      model->merge_adapter("default");
      EXPECT_FALSE(model->has_adapter("default"));
      EXPECT_EQ(model->module().parameters().size(),
                tiny_model(type)->module().parameters().size());
      const double d = testing::max_abs_diff(model->logits_all(lora_test::prompt()), adapted);
      EXPECT_LE(d, 1e-4);
      std::cout << "[lora] " << type << (rs ? " rslora" : "")
                << " merged vs adapter logits max |d| " << d << "\n";
    }
}

TEST_F(LoraModel, MergeIntoBf16WeightsRoundsOnce) {
  auto model = tiny_model("llama", DType::bf16);
  Rng rng(1);
  model->add_lora("default", qv_config(), rng);
  lora_test::randomize_b(*model, "default", 4);
  // Expected: bf16(f32(W) + s·B·A) for one weight, computed here in double.
  auto named = model->module().named_adapter_parameters("default");
  std::vector<float> a = named[0].second.contiguous().to_float_vector();  // layer 0 q A [4, 32]
  std::vector<float> b = named[2].second.contiguous().to_float_vector();  // layer 0 q B [32, 4]
  Tensor wq;
  for (auto& [n, t] : model->named_parameters())
    if (n == "model.layers.0.self_attn.q_proj.weight") wq = t;
  std::vector<float> w = wq.contiguous().to_float_vector();
  std::vector<float> want(w.size());
  for (int i = 0; i < 32; ++i)
    for (int j = 0; j < 32; ++j) {
      double s = 0;
      for (int q = 0; q < 4; ++q) s += double(b[i * 4 + q]) * a[q * 32 + j];
      want[i * 32 + j] = static_cast<float>(w[i * 32 + j] + 2.0 * s);
    }
  const Tensor want_bf16 = Tensor::from_vector(want, {32, 32}, DType::bf16);
  model->merge_adapter("default");
  EXPECT_EQ(wq.dtype(), DType::bf16);
  int differ = 0;
  const std::vector<float> got = wq.contiguous().to_float_vector(),
                           exp = want_bf16.to_float_vector();
  for (size_t i = 0; i < got.size(); ++i) differ += got[i] != exp[i];
  EXPECT_LE(differ, 2) << "elements off by a rounding tie";
}

TEST_F(LoraModel, ArenaPacksOnlyAdapterAndTrainingMovesOnlyIt) {
  auto model = tiny_model("qwen2");
  Rng rng(1);
  model->add_lora("default", qv_config(), rng);
  model->set_active_adapters({"default"});
  const auto before = model->named_parameters();
  std::vector<std::vector<float>> base_values;
  for (auto& [n, t] : before) base_values.push_back(t.contiguous().to_float_vector());
  train::ParamArena arena(model->module());
  int64_t lora_numel = 0;
  for (auto& [n, t] : model->module().named_adapter_parameters("default")) lora_numel += t.numel();
  EXPECT_EQ(arena.numel(), lora_numel);
  for (auto& s : arena.segments()) {
    EXPECT_NE(s.name.find(".lora_"), std::string::npos) << s.name;
    EXPECT_TRUE(s.decay) << s.name;
  }
  train::AdamW opt(arena, {0.9, 0.999, 1e-8, 0.1});
  for (int step = 0; step < 2; ++step) {
    auto out = model->loss(lora_test::train_batch(), step == 1);
    autograd::backward(out.loss_sum, Tensor::from_vector({1.0f / float(out.count)}, {}));
    opt.step(1e-2);
    arena.zero_grads();
  }
  const auto after = model->named_parameters();
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_FALSE(after[i].second.requires_grad()) << after[i].first;
    EXPECT_EQ(after[i].second.contiguous().to_float_vector(), base_values[i]) << after[i].first;
  }
  double bmax = 0;
  for (auto& [n, t] : model->module().named_adapter_parameters("default"))
    if (n.find("lora_B") != std::string::npos)
      for (float v : t.contiguous().to_float_vector()) bmax = std::max(bmax, std::fabs(double(v)));
  EXPECT_GT(bmax, 1e-3);  // B left zero
}

// Gradients of the adapter weights after one loss + backward.
std::vector<std::vector<float>> adapter_grads(models::CausalLM& model, bool recompute, Rng* rng) {
  for (auto& r : model.module().parameters()) r.tensor->set_grad(Tensor());
  models::TrainBatch b = lora_test::train_batch();
  b.dropout_rng = rng;
  auto out = model.loss(b, recompute);
  autograd::backward(out.loss_sum, Tensor::from_vector({1.0f}, {}));
  std::vector<std::vector<float>> g;
  for (auto& [n, t] : model.module().named_adapter_parameters("default", /*grads=*/true))
    g.push_back(t.contiguous().to_float_vector());
  return g;
}

double max_diff(const std::vector<std::vector<float>>& a,
                const std::vector<std::vector<float>>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t j = 0; j < a[i].size(); ++j) d = std::max(d, std::fabs(double(a[i][j]) - b[i][j]));
  return d;
}

TEST_F(LoraModel, DropoutIsReproducibleAndRecomputeReplaysTheMask) {
  auto model = tiny_model("llama");
  nn::LoraConfig c = qv_config();
  c.target_modules = {"all"};
  c.dropout = 0.3;
  Rng init(1);
  model->add_lora("default", c, init);
  lora_test::randomize_b(*model, "default", 5);
  model->set_active_adapters({"default"});
  Rng r1(9), r2(9), r3(10);
  const auto g_plain = adapter_grads(*model, false, &r1);
  const auto g_recompute = adapter_grads(*model, true, &r2);
  EXPECT_LE(max_diff(g_plain, g_recompute), 1e-6);  // same seed: same masks in the replay
  EXPECT_GT(max_diff(g_plain, adapter_grads(*model, false, &r3)), 1e-4);      // another seed
  EXPECT_GT(max_diff(g_plain, adapter_grads(*model, false, nullptr)), 1e-4);  // no dropout
  EXPECT_NE(r1.state(), Rng(9).state());                                      // one draw per call
}

TEST_F(LoraModel, ConfigErrors) {
  auto model = tiny_model("llama");
  Rng rng(1);
  nn::LoraConfig c = qv_config();
  c.target_modules = {"q_proj", "lm_head"};
  expect_throw_with<ConfigError>([&] { model->add_lora("x", c, rng); },
                                 "unknown target module 'lm_head'; valid: all, q_proj, k_proj");
  c = qv_config(0);
  expect_throw_with<ConfigError>([&] { model->add_lora("x", c, rng); }, "rank must be positive");
  c = qv_config();
  c.target_modules = {"layers.7.self_attn.q_proj"};
  expect_throw_with<ConfigError>([&] { model->add_lora("x", c, rng); }, "match no module");
  model->add_lora("x", qv_config(), rng);
  expect_throw_with<ConfigError>([&] { model->add_lora("x", qv_config(), rng); }, "already exists");
  c.target_modules = {"layers.1.self_attn.q_proj"};  // a PEFT dotted suffix: one module
  model->add_lora("y", c, rng);
  EXPECT_EQ(model->module().named_adapter_parameters("y").size(), 2u);
}

}  // namespace
}  // namespace unillm
