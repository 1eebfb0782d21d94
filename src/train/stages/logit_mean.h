// The mean logit of positions without the [tokens × vocab] logits: x_i·(Σ_v w_v)/V, one dot per
// position with the lm_head's mean row (the preference stages' logits/chosen|rejected).
#pragma once

#include <vector>

#include "core/tensor.h"

namespace unillm::train {

class LogitMeans {
 public:
  // The mean of the V logits of every row of x [N, C] under the lm_head w [V, C], on the host.
  // The mean row of w is computed once while w is frozen, at every call while it trains.
  std::vector<double> per_position(const Tensor& x, const Tensor& w);

 private:
  Tensor w_mean_;  // [1, C] in x's dtype, on x's device
};

}  // namespace unillm::train
