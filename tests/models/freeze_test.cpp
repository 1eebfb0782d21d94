// Freeze tuning: LLaMA-Factory's pattern list (last / first N layers, hidden modules, extra
// modules) and its substring selection, unknown modules listing the valid ones, requires_grad on
// the fused tensors, and the f32 upcast of trainable bf16 weights.
#include "models/freeze.h"

#include <map>

#include "lora_test_util.h"

namespace unillm {
namespace {

using lora_test::tiny_model;

std::vector<std::string> names_of(models::CausalLM& m) {
  std::vector<std::string> out;
  for (auto& [n, _] : m.named_parameters()) out.push_back(n);
  return out;
}

using testing::expect_throw_with;

TEST(Freeze, PatternsAsLlamaFactory) {
  testing::init_cpu();
  auto m = tiny_model("llama");
  const auto names = names_of(*m);
  models::FreezeConfig c;
  c.trainable_layers = 1;
  EXPECT_EQ(models::freeze_patterns(names, 2, c), (std::vector<std::string>{".1."}));
  c.trainable_layers = -5;  // first |N|, capped
  c.trainable_modules = {"mlp", "self_attn"};
  c.extra_modules = {"norm", "lm_head"};
  EXPECT_EQ(models::freeze_patterns(names, 2, c),
            (std::vector<std::string>{".0.mlp", ".1.mlp", ".0.self_attn", ".1.self_attn", "norm",
                                      "lm_head"}));
  c.trainable_layers = 30;
  c.trainable_modules = {"all"};
  c.extra_modules = {};
  EXPECT_EQ(models::freeze_patterns(names, 12, c).size(), 12u);
  // Substring semantics: layer ".1." never matches layer 11 or 21.
  EXPECT_FALSE(models::freeze_selects({".1."}, "model.layers.11.mlp.up_proj.weight"));
  EXPECT_FALSE(models::freeze_selects({".1.mlp"}, "model.layers.21.mlp.up_proj.weight"));
  EXPECT_TRUE(models::freeze_selects({".1.mlp"}, "model.layers.1.mlp.up_proj.weight"));
  // "norm" as an extra module also selects every layer norm (LLaMA-Factory's substring rule).
  EXPECT_TRUE(models::freeze_selects({"norm"}, "model.layers.0.input_layernorm.weight"));
}

TEST(Freeze, UnknownModulesListTheValidOnes) {
  testing::init_cpu();
  auto m = tiny_model("qwen2");  // tied: no lm_head
  const auto names = names_of(*m);
  models::FreezeConfig c;
  c.trainable_modules = {"attn"};
  expect_throw_with<ConfigError>([&] { models::freeze_patterns(names, 2, c); },
                                 "module 'attn' not found; choose from all, input_layernorm, mlp, "
                                 "post_attention_layernorm, self_attn");
  c.trainable_modules = {"all"};
  c.extra_modules = {"lm_head"};
  expect_throw_with<ConfigError>([&] { models::freeze_patterns(names, 2, c); },
                                 "module 'lm_head' not found; choose from embed_tokens, norm");
}

TEST(Freeze, AppliesToFusedTensorsAndUpcasts) {
  testing::init_cpu();
  auto m = tiny_model("llama", DType::bf16);
  models::FreezeConfig c;
  c.trainable_layers = 1;
  c.trainable_modules = {"self_attn"};
  c.extra_modules = {"embed_tokens"};
  std::map<std::string, DType> before;
  for (auto& r : m->module().parameters()) before[r.hf_names.at(0)] = r.tensor->dtype();
  const auto res = models::apply_freeze(*m, c);
  std::vector<std::string> want = {"model.embed_tokens.weight",
                                   "model.layers.1.self_attn.q_proj.weight",
                                   "model.layers.1.self_attn.o_proj.weight"};
  EXPECT_EQ(res.trainable, want);
  EXPECT_EQ(before.at("model.layers.1.self_attn.q_proj.weight"), DType::bf16);
  for (auto& r : m->module().parameters()) {
    const bool trainable = std::find(want.begin(), want.end(), r.hf_names.at(0)) != want.end();
    EXPECT_EQ(r.tensor->requires_grad(), trainable) << r.hf_names.at(0);
    EXPECT_EQ(r.tensor->dtype(), trainable ? DType::f32 : before.at(r.hf_names.at(0)))
        << r.hf_names.at(0);
  }
  EXPECT_EQ(res.trainable_elements, 61 * 32 + 64 * 32 + 32 * 32);
  // The fused q/k/v tensor is one real tensor: its three names agree.
  for (auto& r : m->module().parameters())
    if (r.hf_names.size() > 1) {
      for (auto& n : r.hf_names)
        EXPECT_EQ(models::freeze_selects(res.patterns, n), r.tensor->requires_grad()) << n;
    }
}

}  // namespace
}  // namespace unillm
