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

//
// kScore is LLaMA-Factory v1's reward model instead (AutoModelForTokenClassification with one label
// and classifier_dropout 0): score = Linear(hidden, 1) with bias, no dropout, initialised by v1's
// _init_score_head (weight N(0, (1 / (10 · hidden))²), bias 0), stored in the model's own weights
// as score.weight / score.bias (models::SaveOptions::token_classification_head) or in a TOKEN_CLS
// adapter as base_model.model.score.*.
class ValueHead : public nn::Module {
 public:
  enum class Kind { kTrl, kScore };
  // kTrl: PyTorch's nn.Linear initialisation, weight and bias U(±1/√hidden); kScore: v1's. Drawn
  // from rng.
  ValueHead(int64_t hidden, Rng& rng, Device device = {}, Kind kind = Kind::kTrl);
  // kTrl: reads dir/value_head.safetensors; kScore: score.* from dir's adapter_model.safetensors
  // (a TOKEN_CLS adapter) or its model weights. IoError naming the file and key when a key is
  // missing or a shape is not [1, hidden] / [1]. Returns false when dir holds no such head.
  bool load(const std::string& dir);
  // kTrl: writes dir/value_head.safetensors atomically; kScore: nothing (the model or adapter
  // holds it: tensors()).
  void save(const std::string& dir) const;
  // {score.weight, score.bias} (kScore) or {v_head.summary.weight, v_head.summary.bias}.
  nn::NamedTensors tensors() const;
  Kind kind() const { return kind_; }
  // The keep probability of the dropout on the head's input in training: TRL's 0.9, v1's 1.
  double train_keep_prob() const { return kind_ == Kind::kTrl ? 0.9 : 1.0; }
  // The scores of rows h [M, hidden] → [M] f32 (differentiable). keep_prob < 1: dropout on h with
  // a keep-mask drawn from rng (scaled by 1 / keep_prob), as nn.Dropout in training.
  Tensor forward(const Tensor& h, double keep_prob = 1.0, Rng* rng = nullptr) const;
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }

 private:
  int64_t hidden_;
  Kind kind_;
  Tensor weight_, bias_;  // [1, hidden], [1]
  nn::Scope v_head_, summary_;  // kTrl's names; kScore registers "score" (summary_) directly
};

// True when dir/value_head.safetensors exists.
bool has_value_head(const std::string& dir);

}  // namespace unillm::models
