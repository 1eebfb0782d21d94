// HF's `optim` names and the run's optimiser settings from its arguments. Kept apart from the
// optimisers (train/optimizer.cpp) so that argument parsing, which the args fuzz target compiles
// on its own, needs none of them.
#include "core/error.h"
#include "train/args.h"
#include "train/optimizer.h"

namespace unillm::train {

std::string optimizer_kind(const std::string& optim) {
  if (optim == "adamw_torch" || optim == "adamw_torch_fused") return "adamw";
  if (optim == "sgd" || optim == "adafactor") return optim;
  if (optim == "adamw_8bit" || optim == "adamw_bnb_8bit" || optim == "paged_adamw_8bit")
    return "adamw_8bit";
  return "";
}

const char* implemented_optimizers() {
  return "adamw_torch, adamw_torch_fused, sgd, adafactor, adamw_8bit, adamw_bnb_8bit, "
         "paged_adamw_8bit";
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
  return c;
}

}  // namespace unillm::train
