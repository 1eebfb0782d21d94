// torch.optim.SGD as HF's Trainer builds it for `optim: sgd`: learning rate only (no momentum),
// weight decay per param group (coupled: added to the gradient), over the flat arena.
#pragma once

#include "train/optimizer.h"

namespace unillm::train {

class Sgd : public Optimizer {
 public:
  Sgd(ParamArena& arena, double weight_decay) : Optimizer(arena), weight_decay_(weight_decay) {}
  const char* kind() const override { return "sgd"; }
  // p -= lr · (g + wd · p), wd = weight_decay on segments with decay, else 0.
  void step(double lr) override;
  StateTensors state() override { return {}; }  // plain SGD keeps no state

 private:
  double weight_decay_;
};

}  // namespace unillm::train
