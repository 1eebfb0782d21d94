// The inference bundle (docs/ARCHITECTURE.md, "Inference export and quantised weights"): an
// HF-like directory whose weights are stored in the layout the kernels read (quantised linear
// layers as their codes and scales, fused as the model holds them), with inference_plan.json
// naming the passes applied. load_causal_lm reads it directly: the codes are mmapped, nothing
// is converted at start.
#pragma once

#include <optional>
#include <set>
#include <string>

#include "io/checkpoint.h"
#include "models/passes.h"

namespace unillm::models {

inline constexpr const char* kPlanFile = "inference_plan.json";

struct BundleOptions {
  std::string source_dir;  // tokenizer files and generation_config.json are copied from here
  DType dense_dtype = DType::f32;  // the matrices left dense (embedding, lm_head, unquantised)
  size_t max_shard_bytes = size_t{5} << 30;
};

// Writes model (its passes already run by plan) into out_dir: config.json, model.safetensors,
// the tokenizer files, generation_config.json and inference_plan.json (each atomically).
void save_inference_bundle(const CausalLM& model, const PassPlan& plan, const std::string& out_dir,
                           const BundleOptions& options);

// The plan of a bundle, or nothing when dir has no inference_plan.json. ConfigError naming the
// file for a bad plan: another format, a version beyond 1, an unknown pass or quant_type.
std::optional<PassPlan> read_inference_plan(const std::string& dir);

// The name a quantised FusedLinear's tensors share in a bundle: its module prefix and its parts
// joined by '+' ("model.layers.0.self_attn.q_proj+k_proj+v_proj"), then ".qweight", ".scales",
// ".mins".
std::string fused_name(const std::string& prefix, const nn::FusedLinear& linear);

// Gives every FusedLinear whose codes the checkpoint holds its quantised weight (zero copy on
// the CPU), checked against the plan and the layer's shape; returns the checkpoint names used.
std::set<std::string> attach_quantized_weights(CausalLM& model, const io::CheckpointReader& ckpt,
                                               const PassPlan& plan, const std::string& dir);

}  // namespace unillm::models
