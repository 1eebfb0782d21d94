// APOLLO (apollo_torch's APOLLOAdamW as LLaMA-Factory's _create_apollo_optimizer builds it): each
// targeted HF-named matrix's gradient is projected into rank r (a seeded Gaussian basis drawn as
// torch draws it, or the gradient's SVD with apollo_proj: svd), refreshed every update_interval
// steps; Adam's moments live there, and only their ratio to the projected gradient comes back: the
// raw gradient is scaled per channel (the rows of a right projection, the columns of a left one) or
// as a whole by ‖Adam update‖ / ‖projected gradient‖, passed through Fira's norm-growth limiter (at
// most ×1.01 of the previous step's norm) and by sqrt(scale). Other tensors take galore_torch's
// plain AdamW.
#pragma once

#include "train/galore.h"

namespace unillm::train {

class Apollo : public Optimizer {
 public:
  Apollo(ParamArena& arena, const OptimizerConfig& c);
  const char* kind() const override { return "apollo"; }
  void attach(const std::vector<nn::Module*>& modules,
              const std::function<void(const std::string&)>& say) override;
  void step(double lr) override;
  // exp_avg / exp_avg_sq (as GaLore's), proj_left / proj_right (the bases), proj_seed (i64
  // [targets]: each target's next random seed), scaled_grad_norm (f32 [targets]: the limiter's
  // previous norm).
  StateTensors state() override;
  const LowRankLayout& layout() const { return layout_; }

 private:
  void step_target(const LowRankSlot& s, float* p, const float* g, const AdamScalars& k);
  void scale_factors(const LowRankSlot& s, const float* upd, const float* low,
                     std::vector<float>& factor) const;

  OptimizerConfig c_;
  LowRankLayout layout_;
  Tensor m_, v_, left_, right_, seeds_, norms_;
};

}  // namespace unillm::train
