// RMSNorm module.
#include "nn/norm.h"

#include "ops/rms_norm.h"

namespace unillm::nn {

RMSNorm::RMSNorm(int64_t dim, double eps, Device device) : eps_(static_cast<float>(eps)) {
  weight_ = Tensor::empty({dim}, DType::f32, device);
  weight_.fill(1.0);
  register_parameter("weight", &weight_);
}

Tensor RMSNorm::forward(const Tensor& x) const { return ops::rms_norm(x, weight_, eps_); }

}  // namespace unillm::nn
