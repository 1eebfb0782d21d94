// Inference passes (models/passes.h): each fusion on and off gives the same logits (f32, within
// 1e-5 relative; the fused kernels are built to give the same bits) over a prefill and decode
// steps through the paged cache, on llama (GQA, untied), qwen2 (qkv bias, tied) and qwen3 (q/k
// norms: rope stays unfused there, and the pass says so); the plan's defaults and switches.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "autograd/grad_mode.h"
#include "lora_test_util.h"
#include "models/kv_cache.h"
#include "models/passes.h"
#include "nn/attention.h"
#include "nn/norm.h"

namespace unillm {
namespace {

// Prefill of 7 tokens, then 4 single-token decode steps: every logit row, concatenated.
std::vector<float> run(models::CausalLM& m) {
  autograd::NoGradGuard no_grad;
  const std::vector<int32_t>& ids = lora_test::prompt();
  auto caches = models::KvCaches::allocate(m.config(), 2, 8);
  std::vector<float> out = m.forward(models::single_sequence_batch({ids.begin(), ids.begin() + 7}, 0, {1, 0}, 8, false), caches)
                               .to_float_vector();
  for (int64_t t = 7; t < 11; ++t) {
    auto row = m.forward(models::single_sequence_batch({ids[t]}, t, {1, 0}, 8, true), caches).to_float_vector();
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

void apply(models::CausalLM& m, std::vector<std::string> passes, std::vector<std::string>* log = nullptr) {
  models::PassPlan plan;
  plan.passes = std::move(passes);
  models::run_passes(m, plan, [&](const std::string& line) {
    if (log) log->push_back(line);
  });
}

void expect_rel(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::fabs(got[i] - want[i]) / std::max(1e-3, std::fabs(static_cast<double>(want[i]))));
  EXPECT_LE(worst, 1e-5);
}

std::unique_ptr<models::CausalLM> qwen3() {
  const std::string path = testing::temp_dir("passes_qwen3") + "/config.json";
  std::ofstream(path) << R"({"model_type": "qwen3", "vocab_size": 61, "hidden_size": 32, "intermediate_size": 40,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8})";
  auto m = models::build_causal_lm(models::load_model_config(path), DType::f32);
  models::init_weights(*m, 0.1, 11);
  return m;
}

TEST(Passes, EachFusionOnAndOffGivesTheSameLogits) {
  testing::init_cpu();
  for (const std::string family : {"llama", "qwen2", "qwen3"}) {
    SCOPED_TRACE(family);
    auto m = family == "qwen3" ? qwen3() : lora_test::tiny_model(family);
    apply(*m, {});
    const std::vector<float> plain = run(*m);
    for (const auto& passes : std::vector<std::vector<std::string>>{
             {"fuse_residual_rms_norm"}, {"fuse_rope_into_qk"}, {"fuse_residual_rms_norm", "fuse_rope_into_qk"}}) {
      SCOPED_TRACE(passes.size() == 2 ? "both" : passes[0]);
      apply(*m, passes);
      expect_rel(run(*m), plain);
    }
    // Off again: the switches really were on (the fused flags), and a plan without them clears them.
    int norms_on = 0, rope_on = 0;
    m->module().for_each_module("", [&](const std::string&, nn::Module& mod) {
      if (auto* n = dynamic_cast<nn::RMSNorm*>(&mod)) norms_on += n->fused_residual();
      if (auto* a = dynamic_cast<nn::Attention*>(&mod)) rope_on += a->fused_rope();
    });
    EXPECT_GT(norms_on, 0);
    EXPECT_EQ(rope_on, family == "qwen3" ? 0 : 2);
    apply(*m, {});
    m->module().for_each_module("", [&](const std::string&, nn::Module& mod) {
      if (auto* n = dynamic_cast<nn::RMSNorm*>(&mod)) {
        EXPECT_FALSE(n->fused_residual());
      }
    });
    EXPECT_EQ(run(*m), plain);
  }
}

TEST(Passes, TheyLogWhatTheyDid) {
  testing::init_cpu();
  auto m = qwen3();
  std::vector<std::string> log;
  apply(*m, models::make_pass_plan(std::nullopt, {}, {}).passes, &log);
  ASSERT_EQ(log.size(), 2u);
  // 2 layers × (input, post-attention, q, k) + the final norm.
  EXPECT_EQ(log[0], "[pass] fuse_residual_rms_norm: 9 norms take their residual add in one op");
  EXPECT_EQ(log[1],
            "[pass] fuse_rope_into_qk: 0 attention layers split q/k/v and rotate in one op; 2 with q/k norms keep the "
            "separate ops");
}

TEST(Passes, PlanDefaultsAndSwitches) {
  EXPECT_EQ(models::make_pass_plan(std::nullopt, {}, {}).passes,
            (std::vector<std::string>{"fuse_residual_rms_norm", "fuse_rope_into_qk"}));
  models::QuantizeOptions q;
  EXPECT_EQ(models::make_pass_plan(q, {}, {"fuse_rope_into_qk"}).passes,
            (std::vector<std::string>{"quantize_weights", "fuse_residual_rms_norm"}));
  EXPECT_EQ(models::make_pass_plan(std::nullopt, {"fuse_rope_into_qk"}, {}).passes,
            (std::vector<std::string>{"fuse_rope_into_qk"}));
  testing::expect_throw_with<ConfigError>([] { models::make_pass_plan(std::nullopt, {}, {"fuse_everything"}); },
                                          "--no-pass names an unknown pass 'fuse_everything' (known: quantize_weights, "
                                          "fuse_residual_rms_norm, fuse_rope_into_qk)");
}

}  // namespace
}  // namespace unillm
