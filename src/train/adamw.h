// AdamW with torch.optim.AdamW semantics (decoupled weight decay applied first, bias-corrected
// moments), fused over the flat parameter arena with f32 state; and global-norm clipping.
#pragma once

#include <cstdint>

#include "train/arena.h"

namespace unillm::train {

struct AdamWConfig {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
};

class AdamW {
 public:
  AdamW(ParamArena& arena, const AdamWConfig& c);
  // One update with learning rate lr from the arena's gradients; increments step().
  void step(double lr);
  int64_t steps() const { return step_; }
  // State for checkpoints: exp_avg, exp_avg_sq ([numel] f32 each) and the step count.
  Tensor& exp_avg() { return m_; }
  Tensor& exp_avg_sq() { return v_; }
  void set_steps(int64_t s) { step_ = s; }
  const ParamArena& arena() const { return arena_; }

 private:
  ParamArena& arena_;
  AdamWConfig c_;
  Tensor m_, v_;
  int64_t step_ = 0;
};

// Global L2 norm of the arena's gradients (accumulated in double, deterministic), then, when
// max_norm > 0 and max_norm / (norm + 1e-6) < 1, scales the gradients by that coefficient.
// Returns the norm before clipping.
double clip_grad_norm(ParamArena& arena, double max_norm);

}  // namespace unillm::train
