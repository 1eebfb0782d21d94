// RMSNorm module.
#include "nn/norm.h"

#include "ops/elementwise.h"
#include "ops/rms_norm.h"

namespace unillm::nn {

RMSNorm::RMSNorm(int64_t dim, double eps, Device device) : eps_(static_cast<float>(eps)) {
  weight_ = Tensor::empty({dim}, DType::f32, device);
  weight_.fill(1.0);
  register_parameter("weight", &weight_);
}

Tensor RMSNorm::forward(const Tensor& x) const { return ops::rms_norm(x, weight_, eps_); }

ops::AddRmsNormResult RMSNorm::add_forward(const Tensor& x, const Tensor& delta) const {
  if (fused_residual_) return ops::add_rms_norm(x, delta, weight_, eps_);
  Tensor sum = ops::add(x, delta);
  return {sum, forward(sum)};
}

}  // namespace unillm::nn
