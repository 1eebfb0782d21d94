// train::LossScaler against torch.cuda.amp.GradScaler's rule: unscale divides by the scale and
// reports inf/NaN; an overflow halves the scale and resets the count; growth_interval clean steps
// double it. And ParamArena upcasts bf16 trainable parameters into its f32 master copy.
#include "train/loss_scaler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>

#include "models/causal_lm.h"
#include "models/save.h"
#include "support/expect.h"
#include "support/run_cli.h"

namespace unillm::train {
namespace {

std::unique_ptr<models::CausalLM> tiny(DType wd) {
  const std::string path = testing::temp_dir("scaler") + "/config.json";
  std::ofstream(path) << R"({"model_type": "llama", "vocab_size": 32, "hidden_size": 16, "intermediate_size": 24,
                             "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1})";
  auto m = models::build_causal_lm(models::load_model_config(path), wd);
  models::init_weights(*m, 0.1, 3);
  for (auto& p : m->module().parameters()) p.tensor->set_requires_grad(true);
  return m;
}

TEST(LossScaler, UnscalesAndDetectsOverflow) {
  testing::init_cpu();
  auto m = tiny(DType::f32);
  ParamArena arena(m->module());
  LossScaler s;
  for (int64_t i = 0; i < arena.numel(); ++i) arena.grads()[i] = static_cast<float>(i % 7) * 65536.0f;
  EXPECT_TRUE(s.unscale(arena));
  for (int64_t i = 0; i < arena.numel(); ++i) ASSERT_EQ(arena.grads()[i], static_cast<float>(i % 7)) << i;
  arena.grads()[arena.numel() - 1] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(s.unscale(arena));
  arena.grads()[arena.numel() - 1] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(s.unscale(arena));
}

TEST(LossScaler, BacksOffOnOverflowAndGrowsAfterTheInterval) {
  LossScaler s;
  s.growth_interval = 3;
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale, 65536.0);
  s.update(true);  // overflow: halve, restart the count
  EXPECT_EQ(s.scale, 32768.0);
  EXPECT_EQ(s.growth_tracker, 0);
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale, 32768.0);
  s.update(false);  // third clean step in a row
  EXPECT_EQ(s.scale, 65536.0);
  EXPECT_EQ(s.growth_tracker, 0);
}

TEST(ParamArena, UpcastsBf16TrainableParameters) {
  testing::init_cpu();
  auto m = tiny(DType::bf16);
  std::vector<double> before;
  for (auto& p : m->module().parameters())
    for (int64_t i = 0; i < p.tensor->numel(); ++i) before.push_back(p.tensor->item_flat(i));
  ParamArena arena(m->module());
  size_t k = 0;
  for (auto& p : m->module().parameters()) {
    EXPECT_EQ(p.tensor->dtype(), DType::f32) << p.hf_names[0];
    for (int64_t i = 0; i < p.tensor->numel(); ++i) ASSERT_EQ(p.tensor->item_flat(i), before[k++]) << p.hf_names[0];
  }
  EXPECT_EQ(k, static_cast<size_t>(arena.numel()));
}

}  // namespace
}  // namespace unillm::train
