// weighted_cross_entropy: the forward is linear_cross_entropy_rows (with the top-k entropy for
// EAFT), the weights come from its per-row results on the host, and WeightedCrossEntropyNode runs
// the "linear_cross_entropy_backward_rows" kernel with row i scaled by d(loss_sum)·weight_i.
#include "ops/weighted_cross_entropy.h"

#include <cmath>

#include "autograd/node.h"
#include "ops/cross_entropy.h"
#include "ops/dispatch.h"
#include "ops/kernel_call.h"
#include "ops/sequence_logprobs.h"

namespace unillm::ops {
namespace {

class WeightedCrossEntropyNode : public autograd::Node {
 public:
  WeightedCrossEntropyNode(const CrossEntropyRows& r, std::vector<double> weight)
      : x_(r.x),
        w_(r.w),
        labels_(r.labels),
        lse_(r.lse),
        chunk_rows_(r.chunk_rows),
        weight_(std::move(weight)) {}
  std::string name() const override { return "WeightedCrossEntropyNode"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override;
  void release_saved() override {
    x_.release();
    w_.release();
    labels_.release();
    lse_.release();
  }

 private:
  autograd::SavedTensor x_, w_, labels_, lse_;  // [N, C], [V, C], [N] i32 (host), [N]
  int64_t chunk_rows_;
  std::vector<double> weight_;  // [N]
};

std::vector<Tensor> WeightedCrossEntropyNode::backward(const std::vector<Tensor>& g) {
  const Tensor &x = x_.get(), &w = w_.get(), &labels = labels_.get(), &lse = lse_.get();
  const int64_t n = x.size(0);
  const double go = g[0].item_flat(0);
  Tensor scale = Tensor::empty({n}, DType::f64);
  for (int64_t i = 0; i < n; ++i) scale.data<double>()[i] = go * weight_[i];
  Tensor dx = needs_input_grad(0) ? Tensor::empty(x.shape(), x.dtype(), x.device()) : Tensor();
  Tensor dw = needs_input_grad(1)
                  ? Tensor::empty(w.shape(), master_grad_dtype(w.dtype()), w.device())
                  : Tensor();
  const Tensor lab = labels.to(w.device());
  const Tensor scale_dev = scale.to(w.device());
  LinearCrossEntropyRowsBackwardArgs a{
      {x.raw_data(), w.raw_data(), nullptr, lse.raw_data(), 0.0, nullptr, nullptr, n, x.size(1),
       w.size(0), chunk_rows_, x.dtype(), w.dtype()},
      nullptr};
  KernelCall<LinearCrossEntropyRowsBackwardArgs>("linear_cross_entropy_backward_rows", w.device(),
                                                 w.dtype(), a)
      .in(x, &a.base.x)
      .in(w, &a.base.w)
      .in(lab, &a.base.labels)
      .in(lse, &a.base.lse)
      .in(scale_dev, &a.row_scale)
      .out(dx, &a.base.dx)
      .out(dw, &a.base.dw)
      .run(linear_cross_entropy_backward_rows_reference);
  return {dx, dw, Tensor()};
}

}  // namespace

WeightedCrossEntropy weighted_cross_entropy(const Tensor& x_in, const Tensor& w_in,
                                            const Tensor& labels_in, const TokenWeighting& how) {
  if (how.kind == TokenWeighting::Kind::kEaft && how.top_k < 1)
    UNILLM_THROW(ShapeError, "[weighted_cross_entropy] top_k ", how.top_k, ", expected at least 1");
  const bool eaft = how.kind == TokenWeighting::Kind::kEaft;
  CrossEntropyRows rows =
      linear_cross_entropy_rows(x_in, w_in, labels_in, how.chunk_rows, eaft ? how.top_k : 0);
  const int64_t n = rows.x.size(0);
  const int32_t* lab = rows.labels.data<int32_t>();
  WeightedCrossEntropy out;
  out.count = rows.count;
  out.weight.assign(static_cast<size_t>(n), 0.0);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {  // row order: deterministic
    if (lab[i] == kIgnoreIndex) continue;
    const double ce = rows.loss[i];
    out.weight[i] = eaft ? std::pow(rows.topk_entropy[i] / 3.0, how.alpha) : std::exp(-ce);
    sum += out.weight[i] * ce;
    out.ce_sum += ce;
  }
  out.loss_sum = Tensor::empty({}, rows.x.dtype(), rows.x.device());
  out.loss_sum.fill(sum);
  if (autograd::needs_grad({x_in, w_in}))
    autograd::record(std::make_shared<WeightedCrossEntropyNode>(rows, out.weight),
                     {x_in, w_in, labels_in}, {&out.loss_sum});
  return out;
}

}  // namespace unillm::ops
