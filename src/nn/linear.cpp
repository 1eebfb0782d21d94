// Fused projections as row views of one weight.
#include "nn/linear.h"

#include "ops/linear.h"

namespace unillm::nn {

FusedLinear::FusedLinear(int64_t in_features, const std::vector<LinearPart>& parts, bool bias,
                         DType weight_dtype) {
  int64_t total = 0;
  for (auto& p : parts) total += p.out_features;
  weight_ = Tensor::zeros({total, in_features}, weight_dtype);
  if (bias) bias_ = Tensor::zeros({total}, DType::f32);
  int64_t row = 0;
  part_weights_.reserve(parts.size());
  part_biases_.reserve(parts.size());
  for (auto& p : parts) {
    part_weights_.push_back(weight_.slice(0, row, row + p.out_features));
    part_biases_.push_back(bias ? bias_.slice(0, row, row + p.out_features) : Tensor());
    row += p.out_features;
  }
  // Register after the vectors stop growing: the registry keeps pointers to the elements.
  for (size_t i = 0; i < parts.size(); ++i) {
    register_parameter(parts[i].name + ".weight", &part_weights_[i]);
    if (bias) register_parameter(parts[i].name + ".bias", &part_biases_[i]);
  }
}

Tensor FusedLinear::forward(const Tensor& x) const { return ops::linear(x, weight_, bias_); }

}  // namespace unillm::nn
