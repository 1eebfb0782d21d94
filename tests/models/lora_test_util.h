// Shared by the LoRA/adapter/freeze tests: a tiny random model of a family, adapter B filled
// with random values (PEFT initialises B to zero, which would hide every bug), logits helpers.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <string>

#include "core/rng.h"
#include "models/causal_lm.h"
#include "models/save.h"
#include "support/expect.h"
#include "support/run_cli.h"

namespace unillm::lora_test {

// llama (GQA, untied) or qwen2 (qkv bias, tied embeddings); 2 layers; random N(0, 0.1) weights.
inline std::unique_ptr<models::CausalLM> tiny_model(const std::string& type, DType wd = DType::f32,
                                                    uint64_t seed = 7) {
  const std::string path = testing::temp_dir("lora_cfg") + "/config.json";
  std::ofstream(path) << "{\"model_type\": \"" << type
                      << "\", \"vocab_size\": 61, \"hidden_size\": 32, \"intermediate_size\": 40, "
                         "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
                         "\"num_key_value_heads\": 2, \"tie_word_embeddings\": "
                      << (type == "qwen2" ? "true" : "false") << "}";
  auto model = models::build_causal_lm(models::load_model_config(path), wd);
  models::init_weights(*model, 0.1, seed);
  // Non-trivial norms and biases so that every parameter matters.
  Rng rng(seed + 1);
  for (auto& [name, t] : model->named_parameters())
    if (name.find("norm") != std::string::npos || name.find("bias") != std::string::npos) {
      std::vector<float> v(static_cast<size_t>(t.numel()));
      for (auto& x : v)
        x = static_cast<float>((name.find("norm") != std::string::npos ? 1.0 : 0.0) +
                               0.1 * rng.normal());
      Tensor dst = t;
      dst.copy_from(Tensor::from_vector(v, t.shape()));
    }
  return model;
}

// Fills every B of the adapter with N(0, scale²).
inline void randomize_b(models::CausalLM& model, const std::string& adapter, uint64_t seed,
                        double scale = 0.2) {
  Rng rng(seed);
  for (auto& [name, t] : model.module().named_adapter_parameters(adapter))
    if (name.find("lora_B") != std::string::npos) {
      std::vector<float> v(static_cast<size_t>(t.numel()));
      for (auto& x : v) x = static_cast<float>(scale * rng.normal());
      Tensor dst = t.detach();
      dst.copy_from(Tensor::from_vector(v, t.shape()));
    }
}

// Adds adapters "a" and "b" (rank 4, alpha 8, every LoRA-able module) with random B (N(0, 0.25)),
// the serving tests' two adapters.
inline void add_two_random_adapters(models::CausalLM& model) {
  Rng rng(5);
  nn::LoraConfig c;
  c.rank = 4;
  c.alpha = 8;
  c.target_modules = {"all"};
  model.add_lora("a", c, rng);
  model.add_lora("b", c, rng);
  randomize_b(model, "a", 11, 0.5);
  randomize_b(model, "b", 12, 0.5);
}

inline const std::vector<int32_t>& prompt() {
  static const std::vector<int32_t> ids = {1, 5, 17, 33, 2, 60, 9, 41, 12, 7, 28};
  return ids;
}

// logits_all with an explicit adapter choice (unset = the model's active set).
inline Tensor logits_with(models::CausalLM& model,
                          std::optional<std::vector<std::string>> adapters) {
  const auto& ids = prompt();
  const auto t = static_cast<int64_t>(ids.size());
  models::KvCaches caches = models::KvCaches::allocate(model.config(), 1, t);
  models::ForwardBatch b = models::single_sequence_batch(ids, 0, {0}, t, false);
  b.adapters = std::move(adapters);
  return model.forward(b, caches);
}

inline models::TrainBatch train_batch() {
  models::TrainBatch b;
  std::vector<int32_t> ids, pos;
  for (int row = 0; row < 2; ++row)
    for (int i = 0; i < 9; ++i) {
      ids.push_back((row * 13 + i * 7 + 3) % 61);
      pos.push_back(i);
    }
  b.input_ids = Tensor::from_ints(ids, {2, 9});
  b.labels = Tensor::from_ints(ids, {2, 9});
  b.position_ids = Tensor::from_ints(pos, {2, 9});
  return b;
}

}  // namespace unillm::lora_test
