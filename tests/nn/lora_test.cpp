// LoRA configuration: PEFT's target matching (names, dotted suffixes, "all", regex), validation
// messages, scaling (plain and rank-stabilised), and FusedLinear adapters on chosen parts.
#include "nn/lora.h"

#include <gtest/gtest.h>

#include <cmath>

#include "nn/linear.h"
#include "support/expect.h"

namespace unillm::nn {
namespace {

TEST(LoraConfig, ScalingAndTargets) {
  LoraConfig c;
  c.rank = 4;
  c.alpha = 8;
  EXPECT_DOUBLE_EQ(c.scaling(), 2.0);
  c.use_rslora = true;
  EXPECT_DOUBLE_EQ(c.scaling(), 4.0);
  c.target_modules = {"q_proj", "mlp.down_proj"};
  EXPECT_TRUE(lora_targets(c, "model.layers.0.self_attn.q_proj"));
  EXPECT_FALSE(lora_targets(c, "model.layers.0.self_attn.k_proj"));
  EXPECT_TRUE(lora_targets(c, "model.layers.3.mlp.down_proj"));
  EXPECT_FALSE(lora_targets(c, "model.layers.3.xmlp.down_proj"));  // suffix must start at a dot
  EXPECT_EQ(expanded_targets(c), (std::vector<std::string>{"q_proj", "mlp.down_proj"}));
  c.target_modules = {"all"};
  EXPECT_TRUE(lora_targets(c, "model.layers.0.mlp.gate_proj"));
  EXPECT_FALSE(lora_targets(c, "lm_head"));
  EXPECT_EQ(expanded_targets(c), lora_module_names());
  c.target_regex = R"(.*layers\.1\..*(q_proj|v_proj))";
  EXPECT_TRUE(lora_targets(c, "model.layers.1.self_attn.v_proj"));
  EXPECT_FALSE(lora_targets(c, "model.layers.0.self_attn.v_proj"));
}

TEST(LoraConfig, ValidationMessages) {
  LoraConfig c;
  c.target_modules = {"qkv"};
  try {
    validate_lora_config(c);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "[lora] unknown target module 'qkv'; valid: all, q_proj, k_proj, v_proj, "
                 "o_proj, gate_proj, up_proj, down_proj, gate, shared_expert_gate");
  }
  c.target_modules = {"q_proj"};
  c.dropout = 1.0;
  EXPECT_THROW(validate_lora_config(c), ConfigError);
  c.dropout = 0;
  c.target_regex = "(";
  EXPECT_THROW(validate_lora_config(c), ConfigError);
}

TEST(FusedLinearLora, PartsRowsAndMerge) {
  testing::init_cpu();
  FusedLinear f(8, {{"q_proj", 6}, {"k_proj", 4}, {"v_proj", 4}}, false, DType::f32);
  Tensor w = f.weight();
  for (int64_t i = 0; i < w.numel(); ++i)
    w.data<float>()[i] = std::sin(0.37 * static_cast<double>(i));
  LoraConfig c;
  c.rank = 2;
  c.alpha = 6;
  Rng rng(1);
  f.add_lora("a", c, {0, 2}, rng, 5);
  const LoraWeights* lw = f.lora("a");
  ASSERT_NE(lw, nullptr);
  EXPECT_EQ(shape_str(lw->a.shape()), shape_str({4, 8}));
  EXPECT_EQ(shape_str(lw->b.shape()), shape_str({10, 2}));
  Tensor b = lw->b;
  for (int64_t i = 0; i < b.numel(); ++i)
    b.data<float>()[i] = 0.1f * static_cast<float>(i % 7) - 0.3f;
  std::vector<float> xv(24);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = std::cos(static_cast<double>(i));
  Tensor x = Tensor::from_vector(xv, {3, 8});
  LoraRun run{{"a"}, false, 0, {}};
  Tensor with = f.forward(x, &run), base = f.forward(x);
  // k_proj's columns [6, 10) are untouched; q's and v's move.
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 6; j < 10; ++j) EXPECT_EQ(with.item({i, j}), base.item({i, j}));
  EXPECT_GT(testing::max_abs_diff(with, base), 1e-3);
  f.merge_lora("a");
  EXPECT_EQ(f.lora("a"), nullptr);
  EXPECT_LE(testing::max_abs_diff(f.forward(x), with), 1e-5);
}

}  // namespace
}  // namespace unillm::nn
