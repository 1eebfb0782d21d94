// AdamW with torch.optim.AdamW semantics (decoupled weight decay applied first, bias-corrected
// moments), fused over the flat parameter arena with f32 state; and global-norm clipping.
#pragma once

#include <cstdint>

#include "train/optimizer.h"

namespace unillm::train {

struct AdamWConfig {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
};

class AdamW : public Optimizer {
 public:
  AdamW(ParamArena& arena, const AdamWConfig& c);
  const char* kind() const override { return "adamw"; }
  // One update with learning rate lr (× each segment's lr_scale); increments steps().
  void step(double lr) override;
  // exp_avg, exp_avg_sq ([numel] f32 each).
  StateTensors state() override { return {{"exp_avg", &m_}, {"exp_avg_sq", &v_}}; }
  Tensor& exp_avg() { return m_; }
  Tensor& exp_avg_sq() { return v_; }

 private:
  AdamWConfig c_;
  Tensor m_, v_;
};

// Global L2 norm of the arena's gradients (accumulated in double, deterministic), then, when
// max_norm > 0 and max_norm / (norm + 1e-6) < 1, scales the gradients by that coefficient.
// Returns the norm before clipping.
double clip_grad_norm(ParamArena& arena, double max_norm);

}  // namespace unillm::train
