// linear_cross_entropy: checks (labels range-checked here, so kernels trust them), the chunk size,
// dispatch of the forward and backward kernels (key = W's dtype), CrossEntropyNode (saves x, W,
// labels and the per-row logsumexp) and the naive double-precision references.
#include "ops/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "autograd/node.h"
#include "ops/dispatch.h"
#include "ops/kernel_call.h"
#include "ops/plugin_args.h"
#include "ops/sequence_logprobs.h"

namespace unillm::ops {
namespace {

constexpr const char* kOp = "linear_cross_entropy";

void check_cross_entropy(const Tensor& x, const Tensor& w, const Tensor& labels) {
  check_defined(kOp, "x", x);
  check_defined(kOp, "weight", w);
  check_defined(kOp, "labels", labels);
  check_f32_or_f64(kOp, "x", x);
  check_ndim(kOp, "x", x, 2);
  check_ndim(kOp, "weight", w, 2);
  check_ndim(kOp, "labels", labels, 1);
  check_dtype(kOp, "labels", labels, DType::i32);
  check_same_device(kOp, x, w);
  if (!labels.device().is_cpu())
    UNILLM_THROW(DeviceError, "[linear_cross_entropy] labels must be on the CPU");
  if (w.size(1) != x.size(1))
    UNILLM_THROW(ShapeError, "[linear_cross_entropy] weight has shape ", shape_str(w.shape()),
                 ", expected [V, ", x.size(1), "] for x of shape ", shape_str(x.shape()));
  if (labels.size(0) != x.size(0))
    UNILLM_THROW(ShapeError, "[linear_cross_entropy] labels has ", labels.size(0),
                 " elements, expected ", x.size(0), " (one per row of x)");
  bool w_ok = x.dtype() == DType::f64
                  ? w.dtype() == DType::f64
                  : (w.dtype() == DType::f32 || w.dtype() == DType::bf16 || w.dtype() == DType::f16);
  if (!w_ok)
    UNILLM_THROW(DTypeError, "[linear_cross_entropy] weight has dtype ", dtype_name(w.dtype()),
                 " with x ", dtype_name(x.dtype()), ", expected ",
                 x.dtype() == DType::f64 ? "f64" : "f32, bf16 or f16");
}

// Range-checks the labels; returns the number of labelled rows.
int64_t check_labels(const Tensor& labels, int64_t vocab) {
  const int32_t* p = labels.data<int32_t>();
  int64_t count = 0;
  for (int64_t i = 0; i < labels.numel(); ++i) {
    if (p[i] == kIgnoreIndex) continue;
    if (p[i] < 0 || p[i] >= vocab)
      UNILLM_THROW(ShapeError, "[linear_cross_entropy] label ", p[i], " at row ", i,
                   " is outside the vocabulary [0, ", vocab, ") and is not the ignore index ",
                   kIgnoreIndex);
    ++count;
  }
  return count;
}

class CrossEntropyNode : public autograd::Node {
 public:
  CrossEntropyNode(const Tensor& x, const Tensor& w, const Tensor& labels, const Tensor& lse,
                   int64_t chunk_rows)
      : x_(x), w_(w), labels_(labels), lse_(lse), chunk_rows_(chunk_rows) {}
  std::string name() const override { return "CrossEntropyNode"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override;
  void release_saved() override {
    x_.release();
    w_.release();
    labels_.release();
    lse_.release();
  }

 private:
  autograd::SavedTensor x_, w_, labels_, lse_;  // [N, C], [V, C], [N] i32, [N]
  int64_t chunk_rows_;
};

std::vector<Tensor> CrossEntropyNode::backward(const std::vector<Tensor>& g) {
  const Tensor &x = x_.get(), &w = w_.get(), &labels = labels_.get(), &lse = lse_.get();
  Tensor dx = needs_input_grad(0) ? Tensor::empty(x.shape(), x.dtype(), x.device()) : Tensor();
  Tensor dw = needs_input_grad(1)
                  ? Tensor::empty(w.shape(), master_grad_dtype(w.dtype()), w.device())
                  : Tensor();
  const Tensor lab = labels.to(w.device());  // checked on the host in the forward
  LinearCrossEntropyBackwardArgs a{x.raw_data(), w.raw_data(), nullptr,
                                   lse.raw_data(), g[0].item_flat(0),
                                   dx.defined() ? dx.raw_data() : nullptr,
                                   dw.defined() ? dw.raw_data() : nullptr,
                                   x.size(0), x.size(1), w.size(0), chunk_rows_,
                                   x.dtype(), w.dtype()};
  KernelCall<LinearCrossEntropyBackwardArgs>("linear_cross_entropy_backward", w.device(), w.dtype(), a)
      .in(x, &a.x).in(w, &a.w).in(lab, &a.labels).in(lse, &a.lse).out(dx, &a.dx).out(dw, &a.dw)
      .run(linear_cross_entropy_backward_reference);
  return {dx, dw, Tensor()};
}

// Holds gradients computed in the forward for an assumed d(loss_sum); scales them to the actual one.
class EagerCrossEntropyNode : public autograd::Node {
 public:
  EagerCrossEntropyNode(Tensor dx, Tensor dw, double assumed) : dx_(std::move(dx)), dw_(std::move(dw)), assumed_(assumed) {}
  std::string name() const override { return "EagerCrossEntropyNode"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    const double f = g[0].item_flat(0) / assumed_;
    auto scaled = [f](const Tensor& t) {
      if (!t.defined() || f == 1.0) return t;
      Tensor out = t.to(DType::f64);
      double* p = out.data<double>();
      for (int64_t i = 0; i < out.numel(); ++i) p[i] *= f;
      return out.to(t.dtype());
    };
    std::vector<Tensor> out{needs_input_grad(0) ? scaled(dx_) : Tensor(), needs_input_grad(1) ? scaled(dw_) : Tensor(), Tensor()};
    dx_ = dw_ = Tensor();  // one backward, as the gradients are consumed
    return out;
  }

 private:
  Tensor dx_, dw_;
  double assumed_;
};

}  // namespace

std::shared_ptr<autograd::Node> eager_grad_node(Tensor dx, Tensor dw, double assumed) {
  return std::make_shared<EagerCrossEntropyNode>(std::move(dx), std::move(dw), assumed);
}

CrossEntropyResult linear_cross_entropy_eager_grad(const Tensor& x_in, const Tensor& w_in,
                                                   const Tensor& labels_in, double grad_scale,
                                                   int64_t chunk_rows) {
  // The fused kernel (gradients computed with the forward) is a CPU kernel; elsewhere the
  // forward and backward kernels run as two ops.
  auto* kernel = kernel_registry().find_exact<LinearCrossEntropyFusedKernel>(
      "linear_cross_entropy_fused", w_in.device().kind, w_in.dtype());
  const bool gx = autograd::needs_grad({x_in}), gw = autograd::needs_grad({w_in});
  if (!kernel || grad_scale == 0.0 || (!gx && !gw) || x_in.size(1) == 0)
    return linear_cross_entropy(x_in, w_in, labels_in, chunk_rows);
  check_cross_entropy(x_in, w_in, labels_in);
  Tensor x = x_in.contiguous(), w = w_in.contiguous(), labels = labels_in.contiguous();
  const int64_t n = x.size(0), c = x.size(1), v = w.size(0);
  CrossEntropyResult r;
  r.count = check_labels(labels, v);
  r.eager = true;
  if (chunk_rows <= 0) chunk_rows = cross_entropy_auto_chunk(v, x.dtype());
  Tensor lse = Tensor::zeros({n}, x.dtype(), x.device());
  Tensor dx = gx ? Tensor::empty(x.shape(), x.dtype(), x.device()) : Tensor();
  Tensor dw = gw ? Tensor::empty(w.shape(), master_grad_dtype(w.dtype()), w.device()) : Tensor();
  std::vector<double> loss(static_cast<size_t>(n), 0.0);
  LinearCrossEntropyFusedArgs a{x.raw_data(), w.raw_data(), labels.data<int32_t>(), lse.raw_data(), loss.data(),
                                grad_scale, gx ? dx.raw_data() : nullptr, gw ? dw.raw_data() : nullptr,
                                n, c, v, chunk_rows, x.dtype(), w.dtype()};
  kernel(a);
  double sum = 0;
  for (double l : loss) sum += l;  // row order, as linear_cross_entropy
  r.loss_sum = Tensor::empty({}, x.dtype(), x.device());
  r.loss_sum.fill(sum);
  autograd::record(std::make_shared<EagerCrossEntropyNode>(dx, dw, grad_scale), {x_in, w_in, labels_in}, {&r.loss_sum});
  return r;
}

int64_t cross_entropy_auto_chunk(int64_t vocab, DType x_dtype) {
  const int64_t bytes = std::max<int64_t>(1, vocab) * static_cast<int64_t>(dtype_size(x_dtype));
  return std::max<int64_t>(1, (int64_t{32} << 20) / bytes);
}

CrossEntropyRows linear_cross_entropy_rows(const Tensor& x_in, const Tensor& w_in,
                                           const Tensor& labels_in, int64_t chunk_rows, int64_t top_k) {
  check_cross_entropy(x_in, w_in, labels_in);
  CrossEntropyRows r;
  r.x = x_in.contiguous();
  r.w = w_in.contiguous();
  r.labels = labels_in.contiguous();
  const Tensor &x = r.x, &w = r.w, &labels = r.labels;
  const int64_t n = x.size(0), c = x.size(1), v = w.size(0);
  r.count = check_labels(labels, v);
  r.chunk_rows = chunk_rows <= 0 ? cross_entropy_auto_chunk(v, x.dtype()) : chunk_rows;
  Tensor lse = Tensor::zeros({n}, x.dtype());
  r.loss.assign(static_cast<size_t>(n), 0.0);
  if (top_k > 0) {
    top_k = std::min(top_k, v);
    r.topk_entropy.assign(static_cast<size_t>(n), 0.0);
  }
  if (r.count > 0 && c > 0) {
    // Per-row losses come back to the host (n doubles: the loss is logged) and are summed there.
    const Tensor lab = labels.to(w.device());
    Tensor row_loss = Tensor::from_blob(r.loss.data(), {n}, DType::f64, nullptr);
    Tensor lse_dev = Tensor::empty({n}, x.dtype(), x.device());
    Tensor loss_dev = w.device().is_cpu() ? row_loss : Tensor::empty({n}, DType::f64, w.device());
    LinearCrossEntropyArgs a{x.raw_data(), w.raw_data(), nullptr, nullptr,
                             nullptr, n, c, v, r.chunk_rows, x.dtype(), w.dtype()};
    if (top_k > 0) {
      Tensor ent = Tensor::from_blob(r.topk_entropy.data(), {n}, DType::f64, nullptr);
      Tensor ent_dev = w.device().is_cpu() ? ent : Tensor::empty({n}, DType::f64, w.device());
      LinearCrossEntropyTopkArgs ta{a, top_k, nullptr};
      KernelCall<LinearCrossEntropyTopkArgs>("linear_cross_entropy_topk_entropy", w.device(), w.dtype(), ta)
          .in(x, &ta.base.x).in(w, &ta.base.w).in(lab, &ta.base.labels).out(lse_dev, &ta.base.lse)
          .out(loss_dev, &ta.base.loss).out(ent_dev, &ta.entropy)
          .run(linear_cross_entropy_topk_reference);
      if (!w.device().is_cpu()) ent.copy_from(ent_dev);
    } else {
      KernelCall<LinearCrossEntropyArgs>(kOp, w.device(), w.dtype(), a)
          .in(x, &a.x).in(w, &a.w).in(lab, &a.labels).out(lse_dev, &a.lse).out(loss_dev, &a.loss)
          .run(linear_cross_entropy_reference);
    }
    lse = lse_dev;
    if (!w.device().is_cpu()) row_loss.copy_from(loss_dev);
  } else if (r.count > 0) {  // C = 0: every logit is 0, so each labelled row costs log(V)
    const int32_t* lp = labels.data<int32_t>();
    for (int64_t i = 0; i < n; ++i)
      if (lp[i] != kIgnoreIndex) {
        r.loss[i] = std::log(static_cast<double>(v));
        store_scalar(lse.raw_data(), lse.dtype(), i, r.loss[i]);
        if (top_k > 0) r.topk_entropy[i] = std::log(static_cast<double>(top_k));  // k equal logits
      }
  }
  // The backward kernel reads lse on x's device (host-made for no labelled rows or C = 0).
  r.lse = lse.device() != x.device() ? lse.to(x.device()) : lse;
  return r;
}

CrossEntropyResult linear_cross_entropy(const Tensor& x_in, const Tensor& w_in,
                                        const Tensor& labels_in, int64_t chunk_rows) {
  CrossEntropyRows rows = linear_cross_entropy_rows(x_in, w_in, labels_in, chunk_rows);
  CrossEntropyResult r;
  r.count = rows.count;
  double sum = 0;
  for (double l : rows.loss) sum += l;  // row order: deterministic
  r.loss_sum = Tensor::empty({}, rows.x.dtype(), rows.x.device());
  r.loss_sum.fill(sum);
  if (autograd::needs_grad({x_in, w_in})) {
    auto node = std::make_shared<CrossEntropyNode>(rows.x, rows.w, rows.labels, rows.lse, rows.chunk_rows);
    autograd::record(node, {x_in, w_in, labels_in}, {&r.loss_sum});
  }
  return r;
}

namespace {

// logits_j = x_i·w_j for one row, in double.
void row_logits(const void* x, DType xt, const void* w, DType wt, int64_t i, int64_t c,
                int64_t v, std::vector<double>& out) {
  out.assign(static_cast<size_t>(v), 0.0);
  for (int64_t j = 0; j < v; ++j) {
    double s = 0;
    for (int64_t p = 0; p < c; ++p) s += load_scalar(x, xt, i * c + p) * load_scalar(w, wt, j * c + p);
    out[j] = s;
  }
}

double logsumexp(const std::vector<double>& l) {
  double mx = -std::numeric_limits<double>::infinity();
  for (double e : l) mx = std::max(mx, e);
  double s = 0;
  for (double e : l) s += std::exp(e - mx);
  return mx + std::log(s);
}

}  // namespace

void linear_cross_entropy_reference(const LinearCrossEntropyArgs& a) {
  std::vector<double> logits;
  for (int64_t i = 0; i < a.n; ++i) {
    a.loss[i] = 0;
    store_scalar(a.lse, a.x_dtype, i, 0.0);
    if (a.labels[i] == kIgnoreIndex) continue;
    row_logits(a.x, a.x_dtype, a.w, a.w_dtype, i, a.c, a.v, logits);
    const double lse = logsumexp(logits);
    store_scalar(a.lse, a.x_dtype, i, lse);
    a.loss[i] = lse - logits[a.labels[i]];
  }
}

void linear_cross_entropy_topk_reference(const LinearCrossEntropyTopkArgs& ta) {
  const LinearCrossEntropyArgs& a = ta.base;
  linear_cross_entropy_reference(a);
  std::vector<double> logits, heap;
  for (int64_t i = 0; i < a.n; ++i) {
    ta.entropy[i] = 0;
    if (a.labels[i] == kIgnoreIndex) continue;
    row_logits(a.x, a.x_dtype, a.w, a.w_dtype, i, a.c, a.v, logits);
    ta.entropy[i] = topk_entropy(logits.data(), a.v, ta.top_k, heap);
  }
}

namespace {

// The k largest of l (a min-heap of size k: most values fail the comparison with its top), then
// H = log Z − Σ p_j·t_j with Z = Σ exp(t_j) taken relative to the largest.
template <typename T>
double topk_entropy_impl(const T* l, int64_t v, int64_t k, std::vector<double>& heap) {
  heap.clear();
  const auto greater = std::greater<double>();
  for (int64_t j = 0; j < v; ++j) {
    const double e = static_cast<double>(l[j]);
    if (static_cast<int64_t>(heap.size()) < k) {
      heap.push_back(e);
      std::push_heap(heap.begin(), heap.end(), greater);
    } else if (e > heap.front()) {
      std::pop_heap(heap.begin(), heap.end(), greater);
      heap.back() = e;
      std::push_heap(heap.begin(), heap.end(), greater);
    }
  }
  const double mx = *std::max_element(heap.begin(), heap.end());
  double z = 0, zt = 0;
  for (double e : heap) {
    const double p = std::exp(e - mx);
    z += p;
    zt += p * (e - mx);
  }
  return std::log(z) - zt / z;
}

}  // namespace

double topk_entropy(const float* l, int64_t v, int64_t k, std::vector<double>& heap) {
  return topk_entropy_impl(l, v, k, heap);
}
double topk_entropy(const double* l, int64_t v, int64_t k, std::vector<double>& heap) {
  return topk_entropy_impl(l, v, k, heap);
}

namespace {

// The backward reference with dlogits of labelled row i scaled by scale(i).
template <typename Scale>
void backward_reference(const LinearCrossEntropyBackwardArgs& a, Scale scale) {
  const DType gw = master_grad_dtype(a.w_dtype);
  std::vector<double> dw(a.dw ? static_cast<size_t>(a.v * a.c) : 0, 0.0), logits;
  for (int64_t i = 0; i < a.n; ++i) {
    const bool labelled = a.labels[i] != kIgnoreIndex;
    if (labelled) {
      row_logits(a.x, a.x_dtype, a.w, a.w_dtype, i, a.c, a.v, logits);
      const double lse = load_scalar(a.lse, a.x_dtype, i), s = scale(i);
      for (int64_t j = 0; j < a.v; ++j) logits[j] = std::exp(logits[j] - lse) * s;
      logits[a.labels[i]] -= s;  // now dlogits
    }
    for (int64_t p = 0; a.dx && p < a.c; ++p) {
      double s = 0;
      for (int64_t j = 0; labelled && j < a.v; ++j) s += logits[j] * load_scalar(a.w, a.w_dtype, j * a.c + p);
      store_scalar(a.dx, a.x_dtype, i * a.c + p, s);
    }
    for (int64_t j = 0; a.dw && labelled && j < a.v; ++j)
      for (int64_t p = 0; p < a.c; ++p) dw[j * a.c + p] += logits[j] * load_scalar(a.x, a.x_dtype, i * a.c + p);
  }
  for (int64_t e = 0; a.dw && e < a.v * a.c; ++e) store_scalar(a.dw, gw, e, dw[e]);
}

}  // namespace

void linear_cross_entropy_backward_reference(const LinearCrossEntropyBackwardArgs& a) {
  backward_reference(a, [&](int64_t) { return a.grad_scale; });
}

void linear_cross_entropy_backward_rows_reference(const LinearCrossEntropyRowsBackwardArgs& a) {
  backward_reference(a.base, [&](int64_t i) { return a.row_scale[i]; });
}

}  // namespace unillm::ops
