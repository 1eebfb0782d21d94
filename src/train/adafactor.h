// transformers.optimization.Adafactor as HF's Trainer builds it for `optim: adafactor` (or the
// deprecated `adafactor: true`): lr = the scheduled learning rate (relative_step=False,
// scale_parameter=False, warmup_init=False), eps (1e-30, 1e-3), clip_threshold 1, decay_rate
// −0.8, beta1 None (no first moment), weight decay per param group. Each HF-named tensor of the
// arena (a fused QKV's q, k and v apart) is one Adafactor parameter: 2-D ones keep factored
// second moments (a row and a column vector), 1-D ones a full one.
#pragma once

#include <vector>

#include "train/optimizer.h"

namespace unillm::train {

class Adafactor : public Optimizer {
 public:
  Adafactor(ParamArena& arena, double weight_decay);
  const char* kind() const override { return "adafactor"; }
  void step(double lr) override;
  // exp_avg_sq_row / exp_avg_sq_col: the matrices' row and column factors, concatenated in arena
  // order; exp_avg_sq: the 1-D tensors' second moments, concatenated. All f32.
  StateTensors state() override;

 private:
  struct Slot {
    ArenaPart part;
    int64_t state_offset = 0;  // into row_ (and col_ at col_offset) for matrices, else into sq_
    int64_t col_offset = 0;
  };
  void update_matrix(const Slot& s, const float* g, float beta2t, float* upd);
  void update_vector(const Slot& s, const float* g, float beta2t, float* upd);

  double weight_decay_;
  std::vector<Slot> slots_;
  Tensor row_, col_, sq_;
};

}  // namespace unillm::train
