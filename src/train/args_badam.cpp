// Setters and cross-key rules of BAdam (use_badam, badam_*: layer and ratio mode) and LLaMA-Pro
// (use_llama_pro), as LLaMA-Factory's FinetuningArguments and BAdam's optimizers check them.
#include <map>

#include "core/error.h"
#include "train/args_internal.h"
#include "train/optimizer.h"

namespace unillm::train::detail {

namespace {

using Setter = void (*)(TrainArgs&, const Field&);

const std::map<std::string, Setter>& badam_setters() {
  static const std::map<std::string, Setter> m = {
      {"use_badam", [](TrainArgs& a, const Field& f) { a.use_badam = get_bool(f); }},
      {"badam_mode",
       [](TrainArgs& a, const Field& f) { a.badam_mode = get_choice(f, {"layer", "ratio"}); }},
      {"badam_update_ratio",
       [](TrainArgs& a, const Field& f) {
         // LLaMA-Factory asserts > 1e-6; above 1 the package's mask would outgrow the tensor.
         a.badam_update_ratio = get_number_in(f, 1e-6, 1.0, true, false);
       }},
      {"badam_mask_mode",
       [](TrainArgs& a, const Field& f) {
         a.badam_mask_mode = get_choice(f, {"adjacent", "scatter"});
       }},
      {"badam_start_block",
       [](TrainArgs& a, const Field& f) {
         if (f.node.IsNull())
           a.badam_start_block.reset();
         else
           a.badam_start_block = get_int(f, 0);
       }},
      {"badam_switch_mode",
       [](TrainArgs& a, const Field& f) {
         a.badam_switch_mode = get_choice(f, {"ascending", "descending", "random", "fixed"});
       }},
      {"badam_switch_interval",
       [](TrainArgs& a, const Field& f) {
         a.badam_switch_interval = get_int(f, -1);
         if (a.badam_switch_interval == 0)
           bad_value(f, "a positive number of steps, or -1 (never switch)");
       }},
      {"badam_verbose",
       [](TrainArgs& a, const Field& f) {
         a.badam_verbose = get_int(f, 0);
         if (a.badam_verbose > 2) bad_value(f, "0, 1 or 2");
       }},
      {"use_llama_pro", [](TrainArgs& a, const Field& f) { a.use_llama_pro = get_bool(f); }},
  };
  return m;
}

void finish_badam(TrainArgs& a, const std::string& where, Problems& problems) {
  auto fail = [&](const std::string& s) { problems.add("[config] " + where + ": " + s, true); };
  if (a.finetuning_type == "lora") {
    fail(
        "use_badam with finetuning_type lora: Cannot use LoRA with GaLore, APOLLO or BAdam "
        "together.");
  } else if (a.finetuning_type != "full") {
    // BAdam makes each layer trainable in turn whatever freeze chose; unillm asks for full.
    fail("use_badam trains every decoder layer in turn: it needs finetuning_type: full (not " +
         a.finetuning_type + ")");
  }
  if (a.adafactor || optimizer_kind(a.optim) != "adamw")
    fail(
        "use_badam runs AdamW on the active layer: optim must be adamw_torch or adamw_torch_fused "
        "(not " +
        std::string(a.adafactor ? "adafactor" : a.optim) + ")");
  if (a.badam_mode == "ratio") {
    // BlockOptimizerRatio's sparse Adam reads no weight_decay, and LLaMA-Factory passes it no
    // switch interval (the package's 100 holds).
    a.warnings.push_back("[config] " + where +
                         ": badam_mode: ratio: as LLaMA-Factory's BAdam, no weight decay, and the "
                         "masks move every 100 steps whatever badam_switch_interval says");
    return;
  }
  if (a.badam_switch_mode == "fixed" && !a.badam_start_block)
    fail("badam_switch_mode: fixed needs badam_start_block (the one layer to train)");
  // BAdam's groups are built from the wrapped AdamW's defaults, whose weight_decay (torch's 0.01)
  // overrides the group value LLaMA-Factory passes; unillm computes what LLaMA-Factory does.
  a.warnings.push_back("[config] " + where +
                       ": use_badam: as LLaMA-Factory's BAdam, the active layer's AdamW applies "
                       "torch's default weight_decay 0.01 to every tensor of the layer (biases and "
                       "norms too), whatever weight_decay says");
}

}  // namespace

bool set_badam_field(TrainArgs& a, const Field& f) {
  const auto& m = badam_setters();
  auto it = m.find(f.key);
  if (it == m.end()) return false;
  it->second(a, f);
  return true;
}

void finish_badam_args(TrainArgs& a, const std::string& where, Problems& problems) {
  if (a.use_badam) finish_badam(a, where, problems);
  if (!a.use_llama_pro) return;
  auto fail = [&](const std::string& s) { problems.add("[config] " + where + ": " + s, true); };
  // Freeze: the expanded layers train; LoRA / OFT: the adapter goes on their modules only.
  if (a.finetuning_type == "full") {
    fail("`use_llama_pro` is only valid for Freeze or LoRA training.");
  } else if (a.freeze_trainable_layers <= 0) {
    fail("use_llama_pro needs freeze_trainable_layers > 0 (the number of expanded layers), not " +
         std::to_string(a.freeze_trainable_layers));
  }
}

}  // namespace unillm::train::detail
