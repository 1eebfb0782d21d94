// Setters and cross-key rules of use_muon and use_adam_mini. LLaMA-Factory's
// create_custom_optimizer takes the first of GaLore, APOLLO, LoRA+, BAdam, Adam-mini, Muon that is
// on and silently drops the rest, and its trainer then ignores `optim`; unillm refuses such
// combinations instead, so the config says which optimiser runs.
#include <map>

#include "core/error.h"
#include "train/args_internal.h"
#include "train/optimizer.h"

namespace unillm::train::detail {

bool set_muon_adam_mini_field(TrainArgs& a, const Field& f) {
  if (f.key == "use_muon") {
    a.use_muon = get_bool(f);
    return true;
  }
  if (f.key == "use_adam_mini") {
    a.use_adam_mini = get_bool(f);
    return true;
  }
  return false;
}

void finish_muon_adam_mini_args(const TrainArgs& a, const std::string& where, Problems& problems) {
  if (!a.use_muon && !a.use_adam_mini) return;
  auto fail = [&](const std::string& s) { problems.add("[config] " + where + ": " + s, true); };
  const std::string key = a.use_muon ? "use_muon" : "use_adam_mini";
  if (a.use_muon && a.use_adam_mini)
    fail(
        "use_muon with use_adam_mini: give one optimiser (LLaMA-Factory would silently run "
        "Adam-mini)");
  if (a.loraplus_lr_ratio)
    fail(key +
         " with loraplus_lr_ratio: give one optimiser (LLaMA-Factory would silently run "
         "LoRA+'s AdamW)");
  if (a.use_badam)
    fail(key + " with use_badam: give one optimiser (LLaMA-Factory would silently run BAdam)");
  if (a.adafactor || optimizer_kind(a.optim) != "adamw")
    fail(key + " replaces the optimiser: optim must stay adamw_torch or adamw_torch_fused (not " +
         std::string(a.adafactor ? "adafactor" : a.optim) + "; LLaMA-Factory would ignore it)");
}

}  // namespace unillm::train::detail
