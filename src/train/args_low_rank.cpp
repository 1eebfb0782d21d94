// Setters and cross-key rules of GaLore (use_galore, galore_*) and APOLLO (use_apollo, apollo_*),
// as LLaMA-Factory's GaloreArguments / ApolloArguments, _create_galore_optimizer and
// _create_apollo_optimizer check them.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <regex>

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

namespace {

// HF's own GaLore (transformers 4.46's get_optimizer_cls_and_kwargs): optim galore_adamw[_layerwise]
// with optim_target_modules and optim_args becomes `galore` with HF's defaults (rank 128, update
// gap 200, scale 0.25, std), HF's target matching and GaLoreAdamW's own Adam settings.
void finish_hf_galore(TrainArgs& a, const std::string& where, Problems& problems) {
  auto fail = [&](const std::string& s) { problems.add("[config] " + where + ": " + s, true); };
  const bool hf = a.optim == "galore_adamw" || a.optim == "galore_adamw_layerwise";
  if (!hf) {
    if (!a.optim_target_modules.empty())
      a.warnings.push_back("[config] " + where + ": optim_target_modules is read by HF's GaLore optimizers only "
                           "(optim galore_adamw, galore_adamw_layerwise); ignored with optim " + a.optim);
    if (!a.optim_args.empty())
      a.warnings.push_back("[config] " + where + ": optim_args is read by HF's GaLore optimizers here (optim "
                           "galore_adamw, galore_adamw_layerwise); transformers ignores it with optim " + a.optim);
    return;
  }
  if (a.galore.use) {
    fail("use_galore with optim " + a.optim + ": LLaMA-Factory's GaLore keys and HF's GaLore optimizer are two "
         "routes to one optimizer; use one (LLaMA-Factory: Unknown optim: " + a.optim + ")");
    return;
  }
  if (a.optim_target_modules.empty()) {
    fail("optim " + a.optim + " needs optim_target_modules (transformers: You need to define a "
         "`optim_target_modules` in order to properly use GaLore optimizers)");
    return;
  }
  LowRankSettings s;
  s.use = true;
  s.target = a.optim_target_modules;
  s.hf_targets = true;
  s.hf_target_is_string = a.optim_target_modules_is_string;
  s.rank = 128;
  s.update_interval = 200;
  s.scale = 0.25;
  s.layerwise = a.optim == "galore_adamw_layerwise";
  for (const auto& t : s.target) {
    try {
      std::regex check(t);
    } catch (const std::regex_error&) {
      fail("optim_target_modules '" + t + "' is not a valid regular expression");
    }
  }
  std::string args = a.optim_args;
  args.erase(std::remove(args.begin(), args.end(), ' '), args.end());
  size_t at = 0;
  while (!args.empty() && at <= args.size()) {
    const size_t end = std::min(args.find(',', at), args.size());
    const std::string item = args.substr(at, end - at);
    at = end + 1;
    const size_t eq = item.find('=');
    if (eq == std::string::npos) {
      fail("optim_args '" + a.optim_args + "': '" + item + "' is not key=value");
      continue;
    }
    const std::string k = item.substr(0, eq), v = item.substr(eq + 1);
    char* stop = nullptr;
    const bool is_int = k == "rank" || k == "update_proj_gap";
    const double x = std::strtod(v.c_str(), &stop);
    if ((is_int || k == "scale") && (stop == v.c_str() || *stop || (is_int && (x != std::floor(x) || x < 1)))) {
      fail("optim_args " + k + "=" + v + ": expected " + (is_int ? "a positive integer" : "a number"));
      continue;
    }
    if (k == "rank") s.rank = static_cast<int64_t>(x);
    else if (k == "update_proj_gap") s.update_interval = static_cast<int64_t>(x);
    else if (k == "scale") s.scale = x;
    else if (k == "proj_type") {
      if (v != "std" && v != "reverse_std" && v != "right" && v != "left" && v != "full")
        fail("optim_args proj_type=" + v + ": expected std, reverse_std, right, left or full");
      s.proj_type = v;
    } else {
      a.warnings.push_back("[config] " + where + ": optim_args key '" + k + "' is not read by HF's GaLore (rank, "
                           "update_proj_gap, scale, proj_type); ignored, as transformers does");
    }
  }
  a.galore = s;
  a.hf_galore = true;
  a.warnings.push_back("[config] " + where + ": optim " + a.optim + ": transformers gives GaLoreAdamW the learning "
                       "rate only (betas 0.9/0.999, eps 1e-6, no weight decay), so adam_* and weight_decay do not apply");
}

}  // namespace

void finish_low_rank_args(TrainArgs& a, const std::string& where, Problems& problems) {
  finish_hf_galore(a, where, problems);
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
