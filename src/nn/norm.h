// RMSNorm module (HF LlamaRMSNorm): weight [C] stored in f32.
#pragma once

#include "nn/module.h"

namespace unillm::nn {

class RMSNorm : public Module {
 public:
  RMSNorm(int64_t dim, double eps, Device device = {});
  Tensor forward(const Tensor& x) const;  // x [.., C]

 private:
  Tensor weight_;
  float eps_;
};

}  // namespace unillm::nn
