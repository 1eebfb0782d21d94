// Linear layers. FusedLinear stores several HF projections (q/k/v, gate/up) as one [sum N, K]
// matrix so one GEMM computes them; each HF name (q_proj.weight, …) is a row range of it.
#pragma once

#include <string>
#include <vector>

#include "nn/module.h"

namespace unillm::nn {

struct LinearPart {
  std::string name;  // e.g. "q_proj"
  int64_t out_features;
};

class FusedLinear : public Module {
 public:
  // weight [sum(out), in] in weight_dtype; biases (f32) only when bias is true.
  FusedLinear(int64_t in_features, const std::vector<LinearPart>& parts, bool bias,
              DType weight_dtype);
  // x [N, in] -> [N, sum(out)]
  Tensor forward(const Tensor& x) const;
  int64_t out_features() const { return weight_.size(0); }
  const Tensor& weight() const { return weight_; }

 private:
  Tensor weight_;  // [sum(out), in]
  Tensor bias_;  // [sum(out)] f32 or undefined
};

// A plain projection: a FusedLinear with one part named by the parent (e.g. "o_proj").
class Linear : public FusedLinear {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias, DType weight_dtype,
         const std::string& name)
      : FusedLinear(in_features, {{name, out_features}}, bias, weight_dtype) {}
};

}  // namespace unillm::nn
