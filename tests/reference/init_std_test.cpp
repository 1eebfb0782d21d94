// `unillm init` gives HF's initialisation (_init_weights of Llama-family models): every linear
// and embedding matrix N(0, initializer_range), norm weights one, biases zero, the pad_token_id
// embedding row zero. Runs the real binary, then reads the written model back. No Python.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include "models/causal_lm.h"
#include "support/expect.h"
#include "support/run_cli.h"

namespace unillm {
namespace {

struct InitCase {
  std::string name, config;  // config.json text
  int32_t pad_token_id;      // -1: none
};

void PrintTo(const InitCase& c, std::ostream* os) { *os << c.name; }

class InitStd : public ::testing::TestWithParam<InitCase> {};

TEST_P(InitStd, MatchesInitializerRange) {
  testing::init_cpu();
  const InitCase c = GetParam();
  const std::string dir = testing::temp_dir("init-std");
  std::ofstream(dir + "/config.json") << c.config;
  const std::string out = dir + "/model";
  const testing::CliResult r =
      testing::run_unillm("init --config " + testing::shell_quote(dir + "/config.json") +
                          " --out " + testing::shell_quote(out) + " --seed 7");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto model = models::load_causal_lm(out);
  const double range = model->config().initializer_range;
  ASSERT_EQ(range, 0.02);
  double worst = 0;
  int matrices = 0;
  for (const auto& [name, t] : model->named_parameters()) {
    std::vector<float> v = t.contiguous().to_float_vector();
    const bool bias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    if (bias || name.find("norm") != std::string::npos) {
      const float want = bias ? 0.0f : 1.0f;
      for (float x : v) ASSERT_EQ(x, want) << name;
      continue;
    }
    ASSERT_EQ(t.shape().size(), 2u) << name;
    if (name == "model.embed_tokens.weight" && c.pad_token_id >= 0) {
      const int64_t cols = t.size(1), row = c.pad_token_id;
      for (int64_t j = 0; j < cols; ++j) ASSERT_EQ(v[row * cols + j], 0.0f) << "pad row " << row;
      v.erase(v.begin() + row * cols, v.begin() + (row + 1) * cols);
    }
    double sum = 0, sq = 0;
    for (float x : v) sum += x, sq += static_cast<double>(x) * x;
    const double n = static_cast<double>(v.size()), mean = sum / n;
    const double sd = std::sqrt(sq / n - mean * mean);
    const double rel = std::fabs(sd - range) / range;
    worst = std::max(worst, rel);
    ++matrices;
    EXPECT_LE(rel, 0.05) << name << ": std " << sd << " over " << v.size() << " values";
    EXPECT_LE(std::fabs(mean), 4 * range / std::sqrt(n)) << name << ": mean " << mean;
  }
  std::cout << "[init-std] " << c.name << ": " << matrices << " matrices, worst |std/" << range
            << " - 1| = " << worst << "\n";
  std::filesystem::remove_all(dir);
}

const char* kLlama = R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 4,
  "num_hidden_layers": 2, "vocab_size": 500, "max_position_embeddings": 256,
  "initializer_range": 0.02, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
  "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0})";

const char* kQwen2 = R"({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
  "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 4,
  "num_hidden_layers": 2, "vocab_size": 500, "max_position_embeddings": 256,
  "initializer_range": 0.02, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "hidden_act": "silu",
  "tie_word_embeddings": true, "use_sliding_window": false})";

INSTANTIATE_TEST_SUITE_P(Reference, InitStd,
                         ::testing::Values(InitCase{"llama", kLlama, 0},
                                           InitCase{"qwen2", kQwen2, -1}),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace unillm
