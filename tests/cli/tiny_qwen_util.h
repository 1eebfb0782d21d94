// Random models for the CLI tests (`unillm init` with stories260K's tokenizer): a Llama of any
// shape, and a tiny Qwen2 or Qwen3: hidden 64, MLP 96, 2 layers, 4 heads over 2 key/value heads, a 520-row vocabulary;
// qwen2 has q/k/v biases and tied embeddings, qwen3 q/k norms and an lm_head of its own.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "io/json_file.h"
#include "support/expect.h"
#include "support/run_cli.h"

namespace unillm::testing {

// Writes work/<name>.json and a random model of that config in work/<name> (`unillm init` with
// stories260K's tokenizer); returns the dir.
inline std::string init_random_model(const std::string& work, const std::string& name, const nlohmann::json& config) {
  const std::string cfg = work + "/" + name + ".json", dir = work + "/" + name;
  io::write_file_atomic(cfg, config.dump());
  auto r = run_unillm("init --config " + cfg + " --out " + dir + " --tokenizer " +
                      shell_quote(source_path("assets/stories260K")));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return dir;
}

// A Llama config.json of this shape (as many key/value heads as heads; bos 1, eos 2).
inline nlohmann::json llama_config(int64_t hidden, int64_t intermediate, int64_t layers, int64_t heads,
                                   int64_t vocab, int64_t max_positions, bool tied) {
  return {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"hidden_size", hidden},
          {"intermediate_size", intermediate}, {"num_hidden_layers", layers}, {"num_attention_heads", heads},
          {"num_key_value_heads", heads}, {"vocab_size", vocab}, {"max_position_embeddings", max_positions},
          {"rms_norm_eps", 1e-5}, {"tie_word_embeddings", tied}, {"bos_token_id", 1},
          {"eos_token_id", 2}, {"initializer_range", 0.02}};
}

// Writes work/<model_type>.json and the model dir work/<model_type>; returns the dir.
inline std::string tiny_qwen(const std::string& work, const std::string& model_type, int64_t head_dim) {
  const nlohmann::json c = {{"architectures", {model_type == "qwen2" ? "Qwen2ForCausalLM" : "Qwen3ForCausalLM"}},
                            {"model_type", model_type},
                            {"hidden_size", 64},
                            {"intermediate_size", 96},
                            {"num_hidden_layers", 2},
                            {"num_attention_heads", 4},
                            {"num_key_value_heads", 2},
                            {"head_dim", head_dim},
                            {"vocab_size", 520},
                            {"max_position_embeddings", 256},
                            {"rms_norm_eps", 1e-6},
                            {"rope_theta", 1000000.0},
                            {"tie_word_embeddings", model_type == "qwen2"},
                            {"bos_token_id", 1},
                            {"eos_token_id", 2},
                            {"initializer_range", 0.2}};
  return init_random_model(work, model_type, c);
}

}  // namespace unillm::testing
