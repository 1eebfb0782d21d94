// sequence_logprobs: the forward is linear_cross_entropy's (per-row losses summed per sequence);
// SequenceLogprobNode turns the per-sequence upstream gradient into one scale per row for the
// "linear_cross_entropy_backward_rows" kernel.
#include "ops/sequence_logprobs.h"

#include "autograd/node.h"
#include "ops/dispatch.h"
#include "ops/kernel_call.h"

namespace unillm::ops {
namespace {

class SequenceLogprobNode : public autograd::Node {
 public:
  SequenceLogprobNode(const CrossEntropyRows& r, int64_t seq_len, std::vector<double> weight)
      : x_(r.x), w_(r.w), labels_(r.labels), lse_(r.lse), seq_len_(seq_len), chunk_rows_(r.chunk_rows),
        weight_(std::move(weight)) {}
  std::string name() const override { return "SequenceLogprobNode"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override;
  void release_saved() override {
    x_.release();
    w_.release();
    labels_.release();
    lse_.release();
  }

 private:
  autograd::SavedTensor x_, w_, labels_, lse_;  // [N, C], [V, C], [N] i32 (host), [N]
  int64_t seq_len_, chunk_rows_;
  std::vector<double> weight_;  // per position, or empty (all 1)
};

std::vector<Tensor> SequenceLogprobNode::backward(const std::vector<Tensor>& g) {
  const Tensor &x = x_.get(), &w = w_.get(), &labels = labels_.get(), &lse = lse_.get();
  const int64_t n = x.size(0);
  // logps[b] = −Σ loss_i over row b's positions, so d/dloss_i = −g[b].
  const Tensor gb = g[0].to(Device{}).to(DType::f64);
  Tensor scale = Tensor::empty({n}, DType::f64);
  double* s = scale.data<double>();
  for (int64_t i = 0; i < n; ++i) s[i] = -gb.data<double>()[i / seq_len_] * (weight_.empty() ? 1.0 : weight_[i]);
  Tensor dx = needs_input_grad(0) ? Tensor::empty(x.shape(), x.dtype(), x.device()) : Tensor();
  Tensor dw = needs_input_grad(1) ? Tensor::empty(w.shape(), master_grad_dtype(w.dtype()), w.device()) : Tensor();
  const Tensor lab = labels.to(w.device());
  const Tensor scale_dev = scale.to(w.device());
  LinearCrossEntropyRowsBackwardArgs a{{x.raw_data(), w.raw_data(), nullptr, lse.raw_data(), 0.0,
                                        nullptr, nullptr, n, x.size(1), w.size(0), chunk_rows_,
                                        x.dtype(), w.dtype()},
                                       nullptr};
  KernelCall<LinearCrossEntropyRowsBackwardArgs>("linear_cross_entropy_backward_rows", w.device(), w.dtype(), a)
      .in(x, &a.base.x).in(w, &a.base.w).in(lab, &a.base.labels).in(lse, &a.base.lse)
      .in(scale_dev, &a.row_scale).out(dx, &a.base.dx).out(dw, &a.base.dw)
      .run(linear_cross_entropy_backward_rows_reference);
  return {dx, dw, Tensor()};
}

}  // namespace

SequenceLogprobs sequence_logprobs(const Tensor& x_in, const Tensor& w_in, const Tensor& labels_in,
                                   int64_t seq_len, int64_t chunk_rows, const std::vector<double>& token_weight) {
  if (seq_len <= 0 || (x_in.defined() && x_in.ndim() == 2 && x_in.size(0) % seq_len != 0))
    UNILLM_THROW(ShapeError, "[sequence_logprobs] seq_len ", seq_len, " does not divide the ",
                 x_in.defined() && x_in.ndim() >= 1 ? x_in.size(0) : 0, " rows of x");
  CrossEntropyRows rows = linear_cross_entropy_rows(x_in, w_in, labels_in, chunk_rows);
  const int64_t n = rows.x.size(0), b = n / seq_len;
  if (!token_weight.empty() && static_cast<int64_t>(token_weight.size()) != n)
    UNILLM_THROW(ShapeError, "[sequence_logprobs] ", token_weight.size(), " token weights for ", n, " positions");
  const int32_t* lab = rows.labels.data<int32_t>();
  SequenceLogprobs out;
  out.values.assign(static_cast<size_t>(b), 0.0);
  out.tokens.assign(static_cast<size_t>(b), 0);
  for (int64_t i = 0; i < n; ++i) {
    if (lab[i] == kIgnoreIndex) continue;
    out.values[i / seq_len] -= (token_weight.empty() ? 1.0 : token_weight[i]) * rows.loss[i];  // position order
    ++out.tokens[i / seq_len];
  }
  Tensor host = Tensor::empty({b}, rows.x.dtype());
  for (int64_t r = 0; r < b; ++r) store_scalar(host.raw_data(), host.dtype(), r, out.values[r]);
  out.logps = host.to(rows.x.device());
  if (autograd::needs_grad({x_in, w_in}))
    autograd::record(std::make_shared<SequenceLogprobNode>(rows, seq_len, token_weight), {x_in, w_in, labels_in}, {&out.logps});
  return out;
}

}  // namespace unillm::ops
