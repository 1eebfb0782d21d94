// vocab_parallel_cross_entropy: row chunks of logits through ops::linear, the per-row statistics on
// the host combined over the group by the caller's reduce, and the eager gradients through
// ops::linear again (dx = dlogits·W_r as dlogits·(W_rᵀ)ᵀ, dW_r = dlogitsᵀ·x as a product of the
// transposed copies).
#include "ops/vocab_parallel_cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "ops/dispatch.h"
#include "ops/elementwise.h"
#include "ops/linear.h"

namespace unillm::ops {
namespace {

// The eager gradients, rescaled by the backward's d(loss_sum) over the assumed one.
class VocabParallelNode : public autograd::Node {
 public:
  VocabParallelNode(Tensor dx, Tensor dw, double assumed) : dx_(std::move(dx)), dw_(std::move(dw)), assumed_(assumed) {}
  std::string name() const override { return "VocabParallelCrossEntropyNode"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    const double f = g[0].item_flat(0) / assumed_;
    auto scaled = [f](const Tensor& t) {
      if (!t.defined() || f == 1.0) return t;
      Tensor out = t.clone();
      float* p = out.data<float>();
      for (int64_t i = 0; i < out.numel(); ++i) p[i] = static_cast<float>(p[i] * f);
      return out;
    };
    std::vector<Tensor> out{needs_input_grad(0) ? scaled(dx_) : Tensor(), needs_input_grad(1) ? scaled(dw_) : Tensor()};
    dx_ = dw_ = Tensor();  // one backward, as the gradients are consumed
    return out;
  }
  void release_saved() override {
    dx_ = Tensor();
    dw_ = Tensor();
  }

 private:
  Tensor dx_, dw_;
  double assumed_;
};

Tensor transposed(const Tensor& t) { return t.transpose(0, 1).contiguous(); }

}  // namespace

CrossEntropyResult vocab_parallel_cross_entropy(const Tensor& x_in, const Tensor& w_in, const Tensor& labels_in,
                                                int64_t vocab_begin, int64_t vocab, const GroupReduce& reduce,
                                                double grad_scale, int64_t value_begin, int64_t value_end) {
  constexpr const char* kOp = "vocab_parallel_cross_entropy";
  check_defined(kOp, "x", x_in);
  check_defined(kOp, "w", w_in);
  check_ndim(kOp, "x", x_in, 2);
  check_ndim(kOp, "w", w_in, 2);
  check_dtype(kOp, "x", x_in, DType::f32);
  check_dtype(kOp, "labels", labels_in, DType::i32);
  const Tensor x = x_in.contiguous(), w = w_in.contiguous(), labels = labels_in.contiguous();
  const int64_t n = x.size(0), c = x.size(1), vr = w.size(0);
  if (w.size(1) != c || labels.numel() != n)
    UNILLM_THROW(ShapeError, "[", kOp, "] x ", shape_str(x.shape()), ", w ", shape_str(w.shape()), ", labels ",
                 shape_str(labels.shape()));
  if (!x.device().is_cpu()) UNILLM_THROW(DeviceError, "[", kOp, "] is implemented on the CPU only");
  if (value_end < 0) value_end = n;
  const int32_t* lab = labels.data<int32_t>();
  for (int64_t i = 0; i < n; ++i)
    if (lab[i] != kIgnoreIndex && (lab[i] < 0 || lab[i] >= vocab))
      UNILLM_THROW(ShapeError, "[", kOp, "] label ", lab[i], " at row ", i, " is outside [0, ", vocab, ")");
  const bool grads = autograd::needs_grad({x_in, w_in});
  const double assumed = grad_scale != 0 ? grad_scale : 1.0;
  autograd::NoGradGuard no_grad;
  const Tensor wt = transposed(w.to(DType::f32));  // [C, V_r]
  Tensor dx = grads ? Tensor::zeros({n, c}, DType::f32) : Tensor();
  Tensor dw = grads ? Tensor::zeros({vr, c}, DType::f32) : Tensor();
  const int64_t chunk = std::max<int64_t>(1, cross_entropy_auto_chunk(std::max<int64_t>(vr, 1), DType::f32));
  double loss = 0;
  int64_t count = 0;
  for (int64_t r0 = 0; r0 < n; r0 += chunk) {
    const int64_t r1 = std::min(n, r0 + chunk), m = r1 - r0;
    const Tensor xc = x.slice(0, r0, r1).contiguous();
    Tensor logits = linear(xc, w);  // [m, V_r] f32
    float* l = logits.data<float>();
    // Per row: the max over the group, then Σ exp(logit − max) and the target logit (the one rank
    // holding the label adds it), summed over the group in one call.
    std::vector<double> mx(static_cast<size_t>(m), -std::numeric_limits<double>::infinity());
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < vr; ++j) mx[i] = std::max(mx[i], static_cast<double>(l[i * vr + j]));
    reduce(mx, true);
    std::vector<double> sums(static_cast<size_t>(2 * m), 0.0);
    for (int64_t i = 0; i < m; ++i) {
      double s = 0;
      for (int64_t j = 0; j < vr; ++j) s += std::exp(static_cast<double>(l[i * vr + j]) - mx[i]);
      sums[i] = s;
      const int64_t t = lab[r0 + i] - vocab_begin;
      if (lab[r0 + i] != kIgnoreIndex && t >= 0 && t < vr) sums[m + i] = l[i * vr + t];
    }
    reduce(sums, false);
    for (int64_t i = 0; i < m; ++i) {
      const int64_t row = r0 + i;
      const bool scored = lab[row] != kIgnoreIndex;
      const double lse = mx[i] + std::log(sums[i]);
      if (scored && row >= value_begin && row < value_end) {
        loss += lse - sums[m + i];
        ++count;
      }
      if (!grads) continue;
      // dlogits = assumed · (softmax − onehot); ignored rows have none.
      for (int64_t j = 0; j < vr; ++j)
        l[i * vr + j] = scored ? static_cast<float>(assumed * std::exp(static_cast<double>(l[i * vr + j]) - lse)) : 0.0f;
      const int64_t t = lab[row] - vocab_begin;
      if (scored && t >= 0 && t < vr) l[i * vr + t] -= static_cast<float>(assumed);
    }
    if (!grads) continue;
    dx.slice(0, r0, r1).copy_from(linear(logits, wt));                  // [m, C]
    dw = add(dw, linear(transposed(logits), transposed(xc)));           // [V_r, C]
  }
  CrossEntropyResult r;
  r.loss_sum = Tensor::from_vector({static_cast<float>(loss)}, {});
  r.count = count;
  if (grads) {
    autograd::GradModeGuard on(true);
    autograd::record(std::make_shared<VocabParallelNode>(dx, dw, assumed), {x_in, w_in}, {&r.loss_sum});
  }
  return r;
}

}  // namespace unillm::ops
