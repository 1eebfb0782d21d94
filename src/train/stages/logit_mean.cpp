// Mean logits through the lm_head's mean row (see logit_mean.h).
#include "train/stages/logit_mean.h"

#include "autograd/grad_mode.h"
#include "ops/dispatch.h"
#include "ops/linear.h"

namespace unillm::train {

std::vector<double> LogitMeans::per_position(const Tensor& x, const Tensor& w) {
  autograd::NoGradGuard no_grad;
  if (!w_mean_.defined() || w.requires_grad()) {
    const Tensor host = w.to(Device{}).contiguous();  // no copy on the CPU: W can be large
    const int64_t v = host.size(0), c = host.size(1);
    std::vector<double> sum(static_cast<size_t>(c), 0.0);
    for (int64_t j = 0; j < v; ++j)
      for (int64_t p = 0; p < c; ++p) sum[p] += load_scalar(host.raw_data(), host.dtype(), j * c + p);
    std::vector<float> mean(sum.size());
    for (size_t p = 0; p < sum.size(); ++p) mean[p] = static_cast<float>(sum[p] / static_cast<double>(v));
    w_mean_ = Tensor::from_vector(mean, {1, c}).to(x.dtype()).to(x.device());
  }
  const Tensor per_pos = ops::linear(x.detach(), w_mean_).to(Device{}).to(DType::f64);  // [N, 1]
  const double* p = per_pos.data<double>();
  return std::vector<double>(p, p + per_pos.numel());
}

}  // namespace unillm::train
