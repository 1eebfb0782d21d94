// Inference passes (docs/ARCHITECTURE.md, "Inference export and quantised weights"): named
// rewrites of a loaded model that change what its one forward calls (weight formats, kernel
// choices, fused ops) without touching the model code. A plan lists them in order with their
// parameters; run_passes logs each as it runs.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/causal_lm.h"
#include "ops/quant.h"

namespace unillm::models {

struct InputHessians;  // models/calibration.h

struct QuantizeOptions {
  ops::QuantType type = ops::QuantType::int8;
  int64_t group = 32;  // int4 only
  bool symmetric = false;  // int4 only (int8 is always symmetric)
  // The lm_head goes to int8 under both types (llama.cpp likewise keeps its output layer at more
  // bits than Q4_0: Q6_K), unless kept dense, or to int4 (lm_head below). The embedding is
  // always dense: its rows are gathered, not multiplied.
  bool keep_lm_head = false;
  // How the scales (and mins) are stored: f16 or f32; unset = f16 for int4 (a quarter fewer
  // bytes than f32 at g32, read every decode step), f32 for int8 (one scale a row). The
  // lm_head's int8 scales follow it when set (int4 lm_head: as the layers').
  std::optional<DType> scale_dtype;
  // GPTQ only (with hessians): sweep columns in order of falling input energy with static groups
  // (ops::gptq_quantize_weight's act_order; AutoGPTQ's desc_act). --gptq-act-order.
  bool act_order = false;
  DType scales() const { return scale_dtype ? *scale_dtype : type == ops::QuantType::int4 ? DType::f16 : DType::f32; }
  // GPTQ (models/calibration.h, ops/gptq.h): each decoder linear with statistics here is
  // quantised by GPTQ instead of rounding to nearest; the lm_head stays round to nearest.
  std::shared_ptr<const InputHessians> hessians = nullptr;
  // int4 (--lm-head-quant int4, with type int4): the lm_head in the layers' int4 format (group,
  // symmetry, scales), fewer bytes a decode step than llama.cpp's Q6_K output; round to nearest.
  ops::QuantType lm_head = ops::QuantType::int8;
};

struct PassPlan {
  std::vector<std::string> passes;  // in the order they run
  QuantizeOptions quantize;  // quantize_weights
};

// The passes a plan may name, in their default order.
const std::vector<std::string>& known_passes();
// The fusions (exact rewrites, on by default for inference).
const std::vector<std::string>& fusion_passes();
// The plan that the inference flags ask for: quantize_weights when quant is set, then the
// fusions; then
// `only` (--passes a,b: exactly these, in this order) replaces the list and `skip` (--no-pass)
// removes names. Unknown names are a ConfigError naming them and the known ones.
PassPlan make_pass_plan(const std::optional<QuantizeOptions>& quant, const std::vector<std::string>& only,
                        const std::vector<std::string>& skip);
// Runs the plan's passes on model in order; each logs one line through log ("[pass] NAME: ...").
// A model with adapters attached is refused by the weight passes (merge them first). The fusions
// are switches: one the plan leaves out is turned off.
void run_passes(CausalLM& model, const PassPlan& plan,
                const std::function<void(const std::string&)>& log);

}  // namespace unillm::models
