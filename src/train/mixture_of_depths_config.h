// LLaMA-Factory's mixture_of_depths key applied to the config of the model being loaded
// (models/mixture_of_depths.h): shared by `unillm train` and `unillm export`, which must route the
// same layers with the same routers (a LoRA adapter does not hold them: convert draws them from
// `seed` again).
#pragma once

#include <string>

#include "models/model_config.h"
#include "train/args.h"

namespace unillm::train {

// convert: marks a plain llama/mistral config routed, its routers drawn from a.seed (ConfigError
// for a model already routed unless `checkpoint` says it is the run's own checkpoint, or another
// model type); load: ConfigError unless the config names a routed model. model_dir names it.
void apply_mixture_of_depths(const TrainArgs& a, models::ModelConfig& c, const std::string& model_dir, bool checkpoint);

}  // namespace unillm::train
