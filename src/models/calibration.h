// GPTQ's input statistics: the Hessian Σ x·xᵀ (f64 [K, K]) of the inputs of every decoder
// FusedLinear over calibration sequences, from one forward of the dense model per sequence
// (docs/ARCHITECTURE.md, "Inference export and quantised weights").
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "models/causal_lm.h"

namespace unillm::models {

struct InputHessians {
  // fused_name of the linear (models/inference_bundle.h: "model.layers.0.mlp.gate_proj+up_proj")
  // -> f64 [K, K]
  std::map<std::string, Tensor> by_module;
  int64_t rows = 0;  // calibration tokens seen
  std::string source;  // what the plan file records, e.g. "c4_demo: 128 × 1024 tokens"
};

// Runs each sample through model (no grad) with an observer on every FusedLinear that is not
// quantised yet; the observers are removed again before returning.
InputHessians collect_input_hessians(CausalLM& model, const std::vector<std::vector<int32_t>>& samples);

}  // namespace unillm::models
