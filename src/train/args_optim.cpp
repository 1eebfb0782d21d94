// HF's `optim` names and the run's optimiser settings from its arguments. Kept apart from the
// optimisers (train/optimizer.cpp) so that argument parsing, which the args fuzz target compiles
// on its own, needs none of them.
#include "core/error.h"
#include "train/args.h"
#include "train/optimizer.h"

namespace unillm::train {

std::string optimizer_kind(const std::string& optim) {
  // HF's own GaLore is AdamW inside (galore_torch's GaLoreAdamW); args_low_rank.cpp maps it.
  if (optim == "adamw_torch" || optim == "adamw_torch_fused" || optim == "galore_adamw" ||
      optim == "galore_adamw_layerwise")
    return "adamw";
  if (optim == "sgd" || optim == "adafactor") return optim;
  if (optim == "adamw_8bit" || optim == "adamw_bnb_8bit" || optim == "paged_adamw_8bit")
    return "adamw_8bit";
  return "";
}

const char* implemented_optimizers() {
  return "adamw_torch, adamw_torch_fused, sgd, adafactor, adamw_8bit, adamw_bnb_8bit, "
         "paged_adamw_8bit, galore_adamw, galore_adamw_layerwise";
}

OptimizerConfig optimizer_config(const TrainArgs& a) {
  OptimizerConfig c;
  c.kind = a.adafactor ? "adafactor" : optimizer_kind(a.optim);
  UNILLM_CHECK(!c.kind.empty(), "[optim] optim '", a.optim,
               "' passed the key check but is not implemented");
  c.beta1 = a.adam_beta1;
  c.beta2 = a.adam_beta2;
  c.eps = a.adam_epsilon;
  c.weight_decay = a.weight_decay;
  if (a.use_badam) {  // AdamW inside (args_badam.cpp checks optim)
    c.kind = a.badam_mode == "ratio" ? "badam_ratio" : "badam";
    c.badam.update_ratio = a.badam_update_ratio;
    c.badam.mask_mode = a.badam_mask_mode;
    c.badam.backward_passes = a.gradient_accumulation_steps;
    c.badam.switch_mode = a.badam_switch_mode;
    c.badam.start_block = a.badam_start_block.value_or(-1);
    c.badam.switch_interval = a.badam_switch_interval;
    c.badam.verbose = a.badam_verbose;
    c.badam.seed = static_cast<uint64_t>(a.seed);
  }
  if (a.galore.use || a.apollo.use) {  // AdamW inside (args_low_rank.cpp checks optim)
    c.kind = a.galore.use ? "galore" : "apollo";
    c.low_rank = a.galore.use ? a.galore : a.apollo;
  }
  if (a.hf_galore) {  // transformers gives GaLoreAdamW only lr: its defaults for the rest
    c.beta1 = 0.9;
    c.beta2 = 0.999;
    c.eps = 1e-6;
    c.weight_decay = 0.0;
  }
  if (a.use_muon) c.kind = "muon";  // Adam's settings serve its AdamW part
  if (a.use_adam_mini) c.kind = "adam_mini";  // the model's dims come from the trainer
  return c;
}

}  // namespace unillm::train
