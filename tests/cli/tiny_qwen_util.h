// A tiny random Qwen2 or Qwen3 model for the CLI tests (`unillm init` with stories260K's
// tokenizer): hidden 64, MLP 96, 2 layers, 4 heads over 2 key/value heads, a 520-row vocabulary;
// qwen2 has q/k/v biases and tied embeddings, qwen3 q/k norms and an lm_head of its own.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "io/json_file.h"
#include "support/expect.h"
#include "support/run_cli.h"

namespace unillm::testing {

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
  const std::string cfg = work + "/" + model_type + ".json", dir = work + "/" + model_type;
  io::write_file_atomic(cfg, c.dump());
  auto r = run_unillm("init --config " + cfg + " --out " + dir + " --tokenizer " +
                      shell_quote(source_path("assets/stories260K")));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return dir;
}

}  // namespace unillm::testing
