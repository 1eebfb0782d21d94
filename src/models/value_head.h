// TRL's value head (AutoModelForCausalLMWithValueHead, what LLaMA-Factory's stage rm trains):
// v_head.summary = Linear(hidden, 1) with bias on the final hidden states, f32, with dropout
// (summary_dropout_prob 0.1) in training. Saved beside the model or adapter as
// value_head.safetensors with keys v_head.summary.{weight,bias} (LLaMA-Factory's
// fix_valuehead_checkpoint), and read back from there (its load_valuehead_params).
#pragma once

#include <optional>
#include <string>

#include "core/rng.h"
#include "core/tensor.h"
#include "nn/module.h"

namespace unillm::models {

class ValueHead : public nn::Module {
 public:
  // PyTorch's nn.Linear initialisation: weight and bias U(±1/√hidden), drawn from rng.
  ValueHead(int64_t hidden, Rng& rng, Device device = {});
  // Reads dir/value_head.safetensors (IoError naming the file and key when a key is missing or a
  // shape is not [1, hidden] / [1]). Returns false when the file does not exist.
  bool load(const std::string& dir);
  // Writes dir/value_head.safetensors atomically.
  void save(const std::string& dir) const;
  // The scores of rows h [M, hidden] → [M] f32 (differentiable). keep_prob < 1: dropout on h with
  // a keep-mask drawn from rng (scaled by 1 / keep_prob), as nn.Dropout in training.
  Tensor forward(const Tensor& h, double keep_prob = 1.0, Rng* rng = nullptr) const;
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }

 private:
  int64_t hidden_;
  Tensor weight_, bias_;  // [1, hidden], [1]
  nn::Scope v_head_, summary_;
};

// True when dir/value_head.safetensors exists.
bool has_value_head(const std::string& dir);

}  // namespace unillm::models
