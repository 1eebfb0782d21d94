// The pass table and the passes: quantize_weights (every decoder FusedLinear to int8 / int4
// codes, ops::quantize_weight; the lm_head to int8 unless kept; the embedding stays dense), and
// the fusions, which switch a module to its fused op (same values): fuse_residual_rms_norm (every
// RMSNorm's add_forward to ops::add_rms_norm) and fuse_rope_into_qk (every attention's split and
// two ropes to ops::rope_qkv).
#include "models/passes.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "models/calibration.h"
#include "models/inference_bundle.h"
#include "nn/attention.h"
#include "nn/linear.h"
#include "nn/norm.h"
#include "ops/gptq.h"

namespace unillm::models {
namespace {

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

void check_known(const std::string& name, const char* flag) {
  const auto& k = known_passes();
  if (std::find(k.begin(), k.end(), name) == k.end())
    UNILLM_THROW(ConfigError, "[passes] ", flag, " names an unknown pass '", name, "' (known: ", join(k), ")");
}

std::string mib(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

void quantize_weights(CausalLM& model, const QuantizeOptions& q,
                      const std::function<void(const std::string&)>& log) {
  if (!model.adapter_names().empty())
    UNILLM_THROW(ConfigError, "[passes] quantize_weights: the model has LoRA adapters attached; merge them first");
  size_t before = 0, after = 0;
  int64_t layers = 0;
  int64_t calibrated = 0;
  model.module().for_each_module("", [&](const std::string& prefix, nn::Module& m) {
    auto* lin = dynamic_cast<nn::FusedLinear*>(&m);
    if (!lin || lin->is_quantized()) return;
    // A mixture of experts' routers stay dense: tiny, and they decide which experts run (llama.cpp
    // keeps its ffn_gate_inp in f32 too).
    if (lin->parts().size() == 1 && (lin->parts()[0].name == "gate" || lin->parts()[0].name == "shared_expert_gate"))
      return;
    before += lin->weight().nbytes();
    const Tensor* h = nullptr;
    if (q.hessians)
      if (auto it = q.hessians->by_module.find(fused_name(prefix, *lin)); it != q.hessians->by_module.end())
        h = &it->second;
    const std::string name = fused_name(prefix, *lin);
    ops::QuantizedWeight w = h ? ops::gptq_quantize_weight(lin->weight(), *h, q.type, q.group, q.symmetric, 0.01,
                                                           name, q.scales(), q.act_order)
                               : ops::quantize_weight(lin->weight(), q.type, q.group, q.symmetric, q.scales(), name);
    calibrated += h != nullptr;
    after += w.bytes();
    lin->set_quantized(std::move(w));
    ++layers;
  });
  std::string what = ops::quant_type_name(q.type);
  if (q.type == ops::QuantType::int4)
    what += " g" + std::to_string(q.group) + (q.symmetric ? " symmetric" : " asymmetric");
  what += std::string(", ") + dtype_name(q.scales()) + " scales";
  std::string head = "lm_head dense";
  if (!q.keep_lm_head && !model.lm_head_quantized().defined()) {
    const Tensor& w = model.lm_head_weight();
    const bool int4 = q.lm_head == ops::QuantType::int4;
    ops::QuantizedWeight hq =
        int4 ? ops::quantize_weight(w, ops::QuantType::int4, q.group, q.symmetric, q.scales(), "lm_head")
             : ops::quantize_weight(w, ops::QuantType::int8, 0, true, q.scale_dtype ? *q.scale_dtype : DType::f32,
                                    "lm_head");
    head = std::string("lm_head ") +
           (int4 ? "int4 g" + std::to_string(q.group) + (q.symmetric ? " symmetric" : " asymmetric") : "int8") + " (" +
           mib(w.nbytes()) + " -> " + mib(hq.bytes()) + ")";
    model.set_lm_head_quantized(std::move(hq));
  }
  if (q.hessians)
    what += ", GPTQ" + std::string(q.act_order ? " (act order)" : "") + " on " + std::to_string(calibrated) +
            " (calibration: " + q.hessians->source + ")";
  else
    what += ", round to nearest";
  log("[pass] quantize_weights: " + std::to_string(layers) + " linear layers to " + what + ", " +
      mib(before) + " -> " + mib(after) + "; " + head + "; embedding dense");
}

bool in_plan(const PassPlan& plan, const std::string& name) {
  return std::find(plan.passes.begin(), plan.passes.end(), name) != plan.passes.end();
}

// The fusions are switches: a plan without one turns it off, so --no-pass undoes a default.
void fuse_residual_rms_norm(CausalLM& model, bool on, const std::function<void(const std::string&)>& log) {
  int64_t norms = 0;
  model.module().for_each_module("", [&](const std::string&, nn::Module& m) {
    if (auto* norm = dynamic_cast<nn::RMSNorm*>(&m)) {
      norm->set_fused_residual(on);
      ++norms;
    }
  });
  if (on) log("[pass] fuse_residual_rms_norm: " + std::to_string(norms) + " norms take their residual add in one op");
}

void fuse_rope_into_qk(CausalLM& model, bool on, const std::function<void(const std::string&)>& log) {
  int64_t fused = 0, kept = 0;
  model.module().for_each_module("", [&](const std::string&, nn::Module& m) {
    if (auto* attn = dynamic_cast<nn::Attention*>(&m)) (attn->set_fused_rope(on) ? fused : kept) += 1;
  });
  if (!on) return;
  std::string line = "[pass] fuse_rope_into_qk: " + std::to_string(fused) + " attention layers split q/k/v and rotate in one op";
  if (kept) line += "; " + std::to_string(kept) + " with q/k norms keep the separate ops";
  log(line);
}

}  // namespace

const std::vector<std::string>& known_passes() {
  static const std::vector<std::string> k{"quantize_weights", "fuse_residual_rms_norm", "fuse_rope_into_qk"};
  return k;
}

const std::vector<std::string>& fusion_passes() {
  static const std::vector<std::string> k{"fuse_residual_rms_norm", "fuse_rope_into_qk"};
  return k;
}

PassPlan make_pass_plan(const std::optional<QuantizeOptions>& quant, const std::vector<std::string>& only,
                        const std::vector<std::string>& skip) {
  PassPlan plan;
  if (quant) {
    plan.quantize = *quant;
    plan.passes.push_back("quantize_weights");
  }
  for (const auto& f : fusion_passes()) plan.passes.push_back(f);
  if (!only.empty()) {
    for (const auto& n : only) check_known(n, "--passes");
    plan.passes = only;
  }
  for (const auto& n : skip) {
    check_known(n, "--no-pass");
    std::erase(plan.passes, n);
  }
  if (in_plan(plan, "quantize_weights") && !quant)
    UNILLM_THROW(ConfigError, "[passes] quantize_weights needs --quant_type weight_only_int8 or weight_only_int4");
  if (plan.quantize.type == ops::QuantType::int4 && plan.quantize.group <= 0)
    UNILLM_THROW(ConfigError, "[passes] --group-size must be positive, got ", plan.quantize.group);
  return plan;
}

void run_passes(CausalLM& model, const PassPlan& plan, const std::function<void(const std::string&)>& log) {
  for (const auto& name : plan.passes) check_known(name, "the plan");
  for (const auto& name : plan.passes)
    if (name == "quantize_weights") quantize_weights(model, plan.quantize, log);
  fuse_residual_rms_norm(model, in_plan(plan, "fuse_residual_rms_norm"), log);
  fuse_rope_into_qk(model, in_plan(plan, "fuse_rope_into_qk"), log);
}

}  // namespace unillm::models
