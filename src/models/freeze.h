// Freeze tuning as LLaMA-Factory's _setup_freeze_tuning does it: trainable layers (last N, or
// first |N|), trainable hidden modules per layer, extra non-layer modules, applied as substring
// rules on HF names and resolved onto the real (fused) tensors.
#pragma once

#include <string>
#include <vector>

#include "models/causal_lm.h"

namespace unillm::models {

struct FreezeConfig {
  int64_t trainable_layers = 2;  // freeze_trainable_layers: > 0 the last N, < 0 the first |N|
  std::vector<std::string> trainable_modules = {"all"};  // freeze_trainable_modules
  std::vector<std::string> extra_modules;  // freeze_extra_modules (embed_tokens, norm, lm_head)
  bool upcast_trainable = true;            // LLaMA-Factory casts trainable parameters to f32
  // LLaMA-Pro (use_llama_pro): the trainable layers are the last of each of trainable_layers
  // equal groups (stride−1, 2·stride−1, …; stride = layers / trainable_layers), which are the
  // layers `unillm expand-layers` adds.
  bool llama_pro = false;
};

// LLaMA-Factory's trainable_layers list: ".{i}." / ".{i}.{module}" for each trainable layer i
// and module, then the extra modules. hf_names are the base parameters' names (they define the
// valid hidden and extra module names, as in LLaMA-Factory). ConfigError for an unknown module,
// listing the valid ones.
std::vector<std::string> freeze_patterns(const std::vector<std::string>& hf_names,
                                         int64_t num_layers, const FreezeConfig& c);
// LLaMA-Pro's stride rule (the expanded layers): stride − 1, 2·stride − 1, … with stride =
// num_layers / trainable_layers; ConfigError when trainable_layers does not divide num_layers.
std::vector<int64_t> llama_pro_layers(int64_t num_layers, int64_t trainable_layers);
// A name is trainable when it contains any of the patterns (substring, as LLaMA-Factory).
bool freeze_selects(const std::vector<std::string>& patterns, const std::string& hf_name);

struct FreezeResult {
  std::vector<std::string> patterns;
  std::vector<std::string> trainable;  // first HF name of each trainable real tensor
  int64_t trainable_elements = 0, total_elements = 0;
};

// Whether each base real tensor of the model trains under c (all its HF names selected), from
// the names alone, so it may be asked of a model built without memory before a weight is read
// (train's cut-as-read blocks); ConfigError when the rules would split a fused tensor (names
// disagree). patterns: freeze_patterns's, when asked.
struct FreezeDecision {
  nn::ParamRef ref;
  bool trainable;
};
std::vector<FreezeDecision> freeze_decisions(CausalLM& model, const FreezeConfig& c,
                                             std::vector<std::string>* patterns = nullptr);

// Sets requires_grad on every base real tensor of the model (adapter weights are untouched):
// trainable iff all its HF names are selected; ConfigError when the rules would split a fused
// tensor (names disagree). Trainable tensors are converted to f32 when upcast_trainable.
FreezeResult apply_freeze(CausalLM& model, const FreezeConfig& c);

}  // namespace unillm::models
