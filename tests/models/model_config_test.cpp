// config.json parsing: family flags and errors naming the key.
#include "models/model_config.h"

#include <gtest/gtest.h>

#include <fstream>

#include "support/run_cli.h"

namespace unillm::models {
namespace {

std::string write_config(const std::string& json) {
  std::string path = testing::temp_dir("cfg") + "/config.json";
  std::ofstream(path) << json;
  return path;
}

const char* kBase = R"("vocab_size": 100, "hidden_size": 48, "intermediate_size": 88, "num_hidden_layers": 2, "num_attention_heads": 4)";

TEST(ModelConfig, Qwen3FlagsAndExplicitHeadDim) {
  auto c = load_model_config(write_config(std::string("{\"model_type\": \"qwen3\", ") + kBase +
                                          R"(, "num_key_value_heads": 2, "head_dim": 16, "eos_token_id": [5, 6]})"));
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.rope.rot_dim, 16);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{5, 6}));
}

TEST(ModelConfig, Qwen2HasQkvBiasAndArchitectureFallback) {
  auto c = load_model_config(write_config(std::string("{\"architectures\": [\"Qwen2ForCausalLM\"], ") + kBase + "}"));
  EXPECT_EQ(c.model_type, "qwen2");
  EXPECT_TRUE(c.attention_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_EQ(c.head_dim, 12);
}

TEST(ModelConfig, Llama3RopeScaling) {
  auto c = load_model_config(write_config(std::string("{\"model_type\": \"llama\", ") + kBase +
      R"(, "rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})"));
  EXPECT_EQ(c.rope.scaling_type, "llama3");
  EXPECT_DOUBLE_EQ(c.rope.factor, 8.0);
  EXPECT_DOUBLE_EQ(c.rope.theta, 500000.0);
}

// YaRN: Qwen's documented form (original length = max_position_embeddings), LLaMA-Factory's
// (original kept, max enlarged) and the optional keys; dynamic starts at max_position_embeddings.
TEST(ModelConfig, YarnAndDynamicRopeScaling) {
  auto qwen = load_model_config(write_config(std::string("{\"model_type\": \"qwen2\", ") + kBase +
      R"(, "max_position_embeddings": 32768, "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}})"));
  EXPECT_EQ(qwen.rope.scaling_type, "yarn");
  EXPECT_DOUBLE_EQ(qwen.rope.factor, 4.0);
  EXPECT_EQ(qwen.rope.original_max_position, 32768);
  EXPECT_EQ(qwen.rope.beta_fast, 32);
  EXPECT_EQ(qwen.rope.beta_slow, 1);
  EXPECT_TRUE(qwen.rope.truncate);
  auto lf = load_model_config(write_config(std::string("{\"model_type\": \"llama\", ") + kBase +
      R"(, "max_position_embeddings": 1024, "rope_scaling": {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 512, "beta_fast": 16, "attention_factor": 1.5, "truncate": false}})"));
  EXPECT_EQ(lf.rope.original_max_position, 512);
  EXPECT_EQ(lf.rope.beta_fast, 16);
  EXPECT_EQ(lf.rope.attention_factor, 1.5);
  EXPECT_FALSE(lf.rope.truncate);
  auto bare = load_model_config(write_config(std::string("{\"model_type\": \"llama\", ") + kBase +
      R"(, "max_position_embeddings": 4096, "rope_scaling": {"rope_type": "yarn", "factor": 2.0}})"));
  EXPECT_EQ(bare.rope.original_max_position, 4096);  // no original: the model's own length
  auto dyn = load_model_config(write_config(std::string("{\"model_type\": \"llama\", ") + kBase +
      R"(, "max_position_embeddings": 2048, "rope_scaling": {"type": "dynamic", "factor": 2.0}})"));
  EXPECT_EQ(dyn.rope.scaling_type, "dynamic");
  EXPECT_EQ(dyn.rope.max_position, 2048);
  // The attention factor would scale only the rotated part of q and k: refused, naming the key.
  try {
    load_model_config(write_config(std::string("{\"model_type\": \"llama\", ") + kBase +
        R"(, "partial_rotary_factor": 0.5, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}})"));
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("partial_rotary_factor"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_model_config(write_config(std::string("{\"model_type\": \"llama\", ") + kBase +
      R"(, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "beta_fast": -1}})")), ConfigError);
  EXPECT_THROW(load_model_config(write_config(std::string("{\"model_type\": \"llama\", ") + kBase +
      R"(, "rope_scaling": {"rope_type": "longrope", "factor": 4.0}})")), NotImplemented);
}

TEST(ModelConfig, ErrorsNameFileAndKey) {
  auto path = write_config(R"({"model_type": "llama", "vocab_size": 100})");
  try {
    load_model_config(path);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("hidden_size"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_model_config(write_config(std::string("{\"model_type\": \"llama\", ") + kBase + ", \"num_key_value_heads\": 3}")), ConfigError);
  EXPECT_THROW(load_model_config(write_config(std::string("{\"model_type\": \"llama\", ") + kBase + ", \"hidden_size\": \"big\"}")), ConfigError);
  EXPECT_THROW(load_model_config(write_config(std::string("{\"model_type\": \"bert\", ") + kBase + "}")), ConfigError);
  EXPECT_THROW(load_model_config(write_config("{not json")), ConfigError);
}

// Qwen2-MoE / Qwen3-MoE: the sparse layers by HF's rule, the family's attention flags, and keys
// that cannot work named.
TEST(ModelConfig, MixtureOfExpertsKeysAndSparseLayers) {
  auto q3 = load_model_config(write_config(std::string("{\"architectures\": [\"Qwen3MoeForCausalLM\"], ") + kBase +
      R"(, "num_hidden_layers": 6, "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 24, "norm_topk_prob": true, "decoder_sparse_step": 2, "mlp_only_layers": [3]})"));
  EXPECT_EQ(q3.model_type, "qwen3_moe");
  EXPECT_TRUE(q3.qk_norm);
  EXPECT_FALSE(q3.attention_bias);
  EXPECT_TRUE(q3.norm_topk_prob);
  EXPECT_EQ(q3.shared_expert_intermediate_size, 0);  // qwen3_moe has no shared expert
  std::vector<bool> sparse;
  for (int64_t l = 0; l < 6; ++l) sparse.push_back(q3.sparse_layer(l));
  EXPECT_EQ(sparse, (std::vector<bool>{false, true, false, false, false, true}));  // (l + 1) % 2, not 3
  auto q2 = load_model_config(write_config(std::string("{\"model_type\": \"qwen2_moe\", ") + kBase +
      R"(, "num_experts": 4, "num_experts_per_tok": 4, "moe_intermediate_size": 8, "shared_expert_intermediate_size": 16})"));
  EXPECT_TRUE(q2.attention_bias);
  EXPECT_FALSE(q2.o_bias);
  EXPECT_FALSE(q2.norm_topk_prob);
  EXPECT_EQ(q2.shared_expert_intermediate_size, 16);
  EXPECT_TRUE(q2.sparse_layer(0) && q2.sparse_layer(1));
  auto expect_key_error = [](const std::string& json, const std::string& key) {
    try {
      load_model_config(write_config(json));
      ADD_FAILURE() << "accepted " << json;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  };
  const std::string head = std::string("{\"model_type\": \"qwen3_moe\", ") + kBase;
  expect_key_error(head + R"(, "num_experts": 4, "num_experts_per_tok": 5, "moe_intermediate_size": 8})", "num_experts_per_tok");
  expect_key_error(head + R"(, "num_experts": 4, "num_experts_per_tok": 2})", "moe_intermediate_size");
  expect_key_error(head + R"(, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 8, "decoder_sparse_step": 0})",
                   "decoder_sparse_step");
  expect_key_error(head + R"(, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 8, "mlp_only_layers": "1"})",
                   "mlp_only_layers");
}

}  // namespace
}  // namespace unillm::models
