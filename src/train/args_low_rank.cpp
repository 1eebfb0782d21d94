// Setters and cross-key rules of GaLore (use_galore, galore_*) and APOLLO (use_apollo, apollo_*),
// as LLaMA-Factory's GaloreArguments / ApolloArguments, _create_galore_optimizer and
// _create_apollo_optimizer check them.
#include <cmath>
#include <map>

#include "core/error.h"
#include "train/args_internal.h"
#include "train/optimizer.h"

namespace unillm::train::detail {

namespace {

using Setter = void (*)(LowRankSettings&, const Field&);

// The keys of one method without their "galore_" / "apollo_" prefix; `use` as use_<method>.
const std::map<std::string, Setter>& low_rank_setters() {
  static const std::map<std::string, Setter> m = {
      {"use", [](LowRankSettings& s, const Field& f) { s.use = get_bool(f); }},
      {"target",
       [](LowRankSettings& s, const Field& f) {
         s.target = get_list(f);
         if (s.target.empty()) bad_value(f, "module names (q_proj, down_proj, ...) or all");
       }},
      {"rank", [](LowRankSettings& s, const Field& f) { s.rank = get_int(f, 1); }},
      {"update_interval",
       [](LowRankSettings& s, const Field& f) { s.update_interval = get_int(f, 1); }},
      {"scale", [](LowRankSettings& s,
                   const Field& f) { s.scale = get_number_in(f, 0, INFINITY, false, false); }},
      {"layerwise", [](LowRankSettings& s, const Field& f) { s.layerwise = get_bool(f); }},
      {"proj",
       [](LowRankSettings& s, const Field& f) {
         s.proj = get_choice(f, {"svd", "random"});
       }},
      {"scale_type",
       [](LowRankSettings& s, const Field& f) {
         s.scale_type = get_choice(f, {"channel", "tensor"});
       }},
      {"scale_front", [](LowRankSettings& s, const Field& f) { s.scale_front = get_bool(f); }},
  };
  return m;
}

// `key` without its method prefix (use_galore → use, galore_rank → rank), or "" when it is not
// one of `method`'s keys.
std::string suffix_of(const std::string& key, const std::string& method) {
  if (key == "use_" + method) return "use";
  const std::string p = method + "_";
  return key.rfind(p, 0) == 0 ? key.substr(p.size()) : "";
}

bool set_method_field(LowRankSettings& s, const std::string& method, const Field& f) {
  const std::string k = suffix_of(f.key, method);
  if (k.empty()) return false;
  if (k == "proj_type") {  // LLaMA-Factory's Literal choices differ between the two
    s.proj_type = method == "galore"
                      ? get_choice(f, {"std", "reverse_std", "right", "left", "full"})
                      : get_choice(f, {"std", "right", "left"});
    return true;
  }
  const auto& m = low_rank_setters();
  auto it = m.find(k);
  const bool apollo_only = k == "proj" || k == "scale_type" || k == "scale_front";
  if (it == m.end() || (apollo_only && method != "apollo")) return false;
  it->second(s, f);
  return true;
}

void finish_method(TrainArgs& a, const char* method, const char* name, const std::string& where,
                   Problems& problems) {
  auto fail = [&](const std::string& s) { problems.add("[config] " + where + ": " + s, true); };
  const std::string use = std::string("use_") + method;
  const LowRankSettings& s = std::string(method) == "galore" ? a.galore : a.apollo;
  if (a.finetuning_type == "lora")
    fail(use +
         " with finetuning_type lora: Cannot use LoRA with GaLore, APOLLO or BAdam together.");
  const std::string kind = a.adafactor ? "adafactor" : optimizer_kind(a.optim);
  const std::string optim = a.adafactor ? "adafactor (adafactor: true)" : a.optim;
  if (std::string(method) == "galore" && (kind == "adamw_8bit" || kind == "adafactor")) {
    problems.add(
        UNILLM_MSG("[config] ", where, ": use_galore with optim ", optim, " (galore_torch's GaLore",
                   kind == "adafactor" ? "Adafactor" : "AdamW8bit",
                   ") is not implemented yet; GaLore runs with optim adamw_torch"),
        false);
  } else if (kind != "adamw") {
    fail(use + ": " + name +
         " is built on AdamW; optim must be adamw_torch or adamw_torch_fused (LLaMA-Factory: "
         "Unknown optim: " +
         optim + ")");
  }
  if (s.layerwise) {
    if (a.gradient_accumulation_steps != 1)
      fail(std::string(method) + "_layerwise: Per-layer " + name +
           " does not support gradient accumulation (gradient_accumulation_steps is " +
           std::to_string(a.gradient_accumulation_steps) + ").");
    // LLaMA-Factory steps each parameter inside backward, so HF's clipping afterwards sees no
    // gradient: max_grad_norm has no effect there, nor here.
    if (a.max_grad_norm > 0)
      a.warnings.push_back("[config] " + where + ": " + method +
                           "_layerwise: max_grad_norm is ignored (LLaMA-Factory's per-parameter "
                           "updates run before clipping)");
    a.max_grad_norm = 0;
    a.warnings.push_back("[config] " + where + ": " + method +
                         "_layerwise: unillm keeps one gradient arena, so the same per-parameter " +
                         name + " update runs at the optimizer step (no gradient memory is saved)");
  }
}

}  // namespace

bool set_low_rank_field(TrainArgs& a, const Field& f) {
  return set_method_field(a.galore, "galore", f) || set_method_field(a.apollo, "apollo", f);
}

void finish_low_rank_args(TrainArgs& a, const std::string& where, Problems& problems) {
  if (a.galore.use && a.apollo.use)
    problems.add("[config] " + where +
                     ": use_galore and use_apollo: Cannot use GaLore, APOLLO or BAdam together.",
                 true);
  if ((a.galore.use || a.apollo.use) && a.use_badam)
    problems.add("[config] " + where + ": use_badam with use_" +
                     (a.galore.use ? "galore" : "apollo") +
                     ": Cannot use GaLore, APOLLO or BAdam together.",
                 true);
  // LLaMA-Factory's create_custom_optimizer would silently take GaLore / APOLLO over these.
  if ((a.galore.use || a.apollo.use) && (a.use_muon || a.use_adam_mini))
    problems.add("[config] " + where + ": use_" + (a.galore.use ? "galore" : "apollo") +
                     " with use_" + (a.use_muon ? "muon" : "adam_mini") +
                     ": choose one optimiser (LLaMA-Factory would ignore the second)",
                 true);
  if (a.galore.use) finish_method(a, "galore", "GaLore", where, problems);
  if (a.apollo.use) finish_method(a, "apollo", "APOLLO", where, problems);
}

}  // namespace unillm::train::detail
