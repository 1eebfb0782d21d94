// mixture_of_depths on a model's config (train/mixture_of_depths_config.h).
#include "train/mixture_of_depths_config.h"

#include "core/error.h"

namespace unillm::train {

void apply_mixture_of_depths(const TrainArgs& a, models::ModelConfig& c, const std::string& model_dir, bool checkpoint) {
  if (a.mixture_of_depths.empty()) return;
  const std::string at = "[config] " + a.mixture_of_depths_where + ": mixture_of_depths: " + a.mixture_of_depths;
  if (c.mixture_of_depths) {  // config.json names a routed model (the package's save, or a checkpoint)
    if (a.mixture_of_depths == "convert" && !checkpoint)
      UNILLM_THROW(ConfigError, at, ": ", model_dir, " is already a mixture-of-depths model (", c.architecture,
                   "); load it with mixture_of_depths: load");
    return;
  }
  if (a.mixture_of_depths == "load")
    UNILLM_THROW(ConfigError, at, ": ", model_dir, " is not a mixture-of-depths checkpoint (architectures: ",
                 c.architecture.empty() ? "none" : c.architecture, "); route a plain model with mixture_of_depths: convert");
  if (c.num_experts > 0 || (c.model_type != "llama" && c.model_type != "mistral"))
    UNILLM_THROW(ConfigError, at, ": model_type ", c.model_type, " is not supported (LLaMA-Factory's list, dense: "
                 "llama, mistral)");
  c.mixture_of_depths = c.mod_convert = true;
  c.mod_seed = static_cast<uint64_t>(a.seed);
}

}  // namespace unillm::train
