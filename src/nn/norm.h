// RMSNorm module (HF LlamaRMSNorm): weight [C] stored in f32.
#pragma once

#include "nn/module.h"
#include "ops/add_rms_norm.h"

namespace unillm::nn {

class RMSNorm : public Module {
 public:
  RMSNorm(int64_t dim, double eps, Device device = {});
  Tensor forward(const Tensor& x) const;  // x [.., C]
  // The residual add before the norm and the norm: {x + delta, forward(x + delta)}. One fused op
  // once the fuse_residual_rms_norm pass has set fused_residual; the two ops otherwise (same
  // values either way).
  ops::AddRmsNormResult add_forward(const Tensor& x, const Tensor& delta) const;
  void set_fused_residual(bool on) { fused_residual_ = on; }
  bool fused_residual() const { return fused_residual_; }
  const Tensor& weight() const { return weight_; }

 private:
  Tensor weight_;
  float eps_;
  bool fused_residual_ = false;
};

}  // namespace unillm::nn
