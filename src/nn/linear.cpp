// Fused projections: one weight, HF names as row ranges.
#include "nn/linear.h"

#include "ops/linear.h"

namespace unillm::nn {

FusedLinear::FusedLinear(int64_t in_features, const std::vector<LinearPart>& parts, bool bias,
                         DType weight_dtype) {
  int64_t total = 0;
  std::vector<NamedPart> wparts, bparts;
  for (auto& p : parts) {
    wparts.push_back({p.name + ".weight", total, total + p.out_features});
    bparts.push_back({p.name + ".bias", total, total + p.out_features});
    total += p.out_features;
  }
  weight_ = Tensor::zeros({total, in_features}, weight_dtype);
  register_fused_parameter("weight", &weight_, std::move(wparts));
  if (bias) {
    bias_ = Tensor::zeros({total}, DType::f32);
    register_fused_parameter("bias", &bias_, std::move(bparts));
  }
}

Tensor FusedLinear::forward(const Tensor& x) const { return ops::linear(x, weight_, bias_); }

}  // namespace unillm::nn
