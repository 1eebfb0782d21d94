// Shared by the train tests that need a small random Llama: vocab 40, hidden 16, F 24, 2 heads of
// 8 with one kv head, weights N(0, 0.2) from seed 5; optionally a fresh LoRA adapter "default"
// (rank 4, alpha 8, every target; A from seed 7, B zero) made active, the base left frozen.
#pragma once

#include <fstream>
#include <memory>
#include <string>

#include "core/rng.h"
#include "models/causal_lm.h"
#include "models/save.h"
#include "support/expect.h"
#include "support/run_cli.h"

namespace unillm::testing {

inline std::unique_ptr<models::CausalLM> tiny_llama(const std::string& tag, int layers, bool lora) {
  init_cpu();
  const std::string path = temp_dir(tag) + "/config.json";
  std::ofstream(path) << R"({"model_type": "llama", "vocab_size": 40, "hidden_size": 16, "intermediate_size": 24,
                             "num_hidden_layers": )"
                      << layers << R"(, "num_attention_heads": 2, "num_key_value_heads": 1})";
  auto m = models::build_causal_lm(models::load_model_config(path), DType::f32);
  models::init_weights(*m, 0.2, 5);
  if (lora) {
    nn::LoraConfig c;
    c.rank = 4;
    c.alpha = 8;
    c.target_modules = {"all"};
    Rng rng(7);
    m->add_lora("default", c, rng);
    m->set_active_adapters({"default"});
  }
  return m;
}

}  // namespace unillm::testing
