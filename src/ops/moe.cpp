// moe_route, moe_combine and sigmoid with their backward nodes (ops/moe.h).
#include "ops/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "autograd/node.h"
#include "ops/dispatch.h"
#include "ops/kernel_call.h"
#include "ops/moe_balance.h"

namespace unillm::ops {
namespace {

// A host copy of t as f64 values (the router's logits, a gate's values: N·E and N elements).
std::vector<double> host_values(const Tensor& t) {
  const Tensor h = t.to(Device{}).contiguous();
  std::vector<double> v(static_cast<size_t>(h.numel()));
  for (int64_t i = 0; i < h.numel(); ++i) v[static_cast<size_t>(i)] = load_scalar(h.raw_data(), h.dtype(), i);
  return v;
}

Tensor from_values(const std::vector<double>& v, const Shape& shape, DType dtype, Device device) {
  Tensor h = Tensor::empty(shape, dtype, Device{});
  for (size_t i = 0; i < v.size(); ++i) store_scalar(h.raw_data(), dtype, static_cast<int64_t>(i), v[i]);
  return h.to(device);
}

class MoeRouteNode : public autograd::Node {
 public:
  MoeRouteNode(std::vector<double> probs, std::vector<double> weights, std::vector<int32_t> experts, int64_t n,
               int64_t e, int64_t k, bool normalize, DType dtype, Device device, std::shared_ptr<MoeBalance> balance)
      : probs_(std::move(probs)), weights_(std::move(weights)), experts_(std::move(experts)), n_(n), e_(e),
        k_(k), normalize_(normalize), dtype_(dtype), device_(device), balance_(std::move(balance)) {}
  std::string name() const override { return "MoeRouteNode"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    const std::vector<double> dw = host_values(g[0]);
    std::vector<double> dl(static_cast<size_t>(n_ * e_), 0.0);
    for (int64_t n = 0; n < n_; ++n) {
      double* row = dl.data() + n * e_;
      const double* w = weights_.data() + n * k_;
      const double* d = dw.data() + n * k_;
      const int32_t* ex = experts_.data() + n * k_;
      if (normalize_) {  // the softmax over the k chosen logits
        double dot = 0;
        for (int64_t j = 0; j < k_; ++j) dot += w[j] * d[j];
        for (int64_t j = 0; j < k_; ++j) row[ex[j]] = w[j] * (d[j] - dot);
      } else {  // the full softmax, with the gradient only at the chosen experts
        const double* p = probs_.data() + n * e_;
        double dot = 0;
        for (int64_t j = 0; j < k_; ++j) dot += p[ex[j]] * d[j];
        for (int64_t x = 0; x < e_; ++x) row[x] = -p[x] * dot;
        for (int64_t j = 0; j < k_; ++j) row[ex[j]] += p[ex[j]] * d[j];
      }
    }
    // The load-balancing loss's share, through the full softmax (known now the forward is over).
    if (balance_) balance_->add_grad(probs_, dl);
    return {from_values(dl, {n_, e_}, dtype_, device_)};
  }

 private:
  std::vector<double> probs_, weights_;
  std::vector<int32_t> experts_;
  int64_t n_, e_, k_;
  bool normalize_;
  DType dtype_;
  Device device_;
  std::shared_ptr<MoeBalance> balance_;
};

class MoeCombineNode : public autograd::Node {
 public:
  MoeCombineNode(const Tensor& y, const Tensor& w, const Tensor& idx, int64_t rows)
      : y_(autograd::SavedTensor::activation(y)), w_(autograd::SavedTensor::activation(w)), idx_(idx), rows_(rows) {}
  std::string name() const override { return "MoeCombineNode"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    const Tensor& y = y_.get();
    const Tensor& w = w_.get();
    Tensor dout = g[0].to(y.dtype()).contiguous();
    Tensor dy = Tensor::empty(y.shape(), y.dtype(), y.device()), dw = Tensor::empty(w.shape(), w.dtype(), w.device());
    if (y.numel() == 0) return {dy, dw, Tensor()};
    const Tensor idx = idx_.get().to(y.device());
    MoeCombineBackwardArgs a{nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, y.size(0), rows_, y.size(1), y.dtype()};
    KernelCall<MoeCombineBackwardArgs>("moe_combine_backward", y.device(), y.dtype(), a)
        .in(y, &a.y).in(w, &a.w).in(idx, &a.idx).in(dout, &a.dout).out(dy, &a.dy).out(dw, &a.dw)
        .run(moe_combine_backward_reference);
    return {dy, dw, Tensor()};
  }
  void release_saved() override {
    y_.release();
    w_.release();
    idx_.release();
  }

 private:
  autograd::SavedTensor y_, w_, idx_;
  int64_t rows_;
};

class SigmoidNode : public autograd::Node {
 public:
  explicit SigmoidNode(const Tensor& s) : s_(autograd::SavedTensor::activation(s)) {}
  std::string name() const override { return "SigmoidNode"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    const Tensor& s = s_.get();
    const std::vector<double> sv = host_values(s), dy = host_values(g[0]);
    std::vector<double> dx(sv.size());
    for (size_t i = 0; i < sv.size(); ++i) dx[i] = dy[i] * sv[i] * (1.0 - sv[i]);
    return {from_values(dx, s.shape(), s.dtype(), s.device())};
  }
  void release_saved() override { s_.release(); }

 private:
  autograd::SavedTensor s_;
};

template <class T>
void combine(const MoeCombineArgs& a) {
  const T* y = static_cast<const T*>(a.y);
  const T* w = static_cast<const T*>(a.w);
  T* out = static_cast<T*>(a.out);
  std::fill(out, out + a.rows * a.dim, T(0));
  for (int64_t i = 0; i < a.m; ++i) {
    T* o = out + int64_t{a.idx[i]} * a.dim;
    const T* yi = y + i * a.dim;
    for (int64_t c = 0; c < a.dim; ++c) o[c] += w[i] * yi[c];
  }
}

template <class T>
void combine_backward(const MoeCombineBackwardArgs& a) {
  const T* y = static_cast<const T*>(a.y);
  const T* w = static_cast<const T*>(a.w);
  const T* dout = static_cast<const T*>(a.dout);
  T* dy = static_cast<T*>(a.dy);
  T* dw = static_cast<T*>(a.dw);
  for (int64_t i = 0; i < a.m; ++i) {
    const T* d = dout + int64_t{a.idx[i]} * a.dim;
    const T* yi = y + i * a.dim;
    T* dyi = dy + i * a.dim;
    double dot = 0;
    for (int64_t c = 0; c < a.dim; ++c) {
      dyi[c] = w[i] * d[c];
      dot += static_cast<double>(yi[c]) * static_cast<double>(d[c]);
    }
    dw[i] = static_cast<T>(dot);
  }
}

}  // namespace

MoeRouting moe_route(const Tensor& logits, int64_t k, bool normalize, const std::shared_ptr<MoeBalance>& balance,
                     bool record) {
  constexpr const char* kOp = "moe_route";
  check_defined(kOp, "logits", logits);
  check_ndim(kOp, "logits", logits, 2);
  check_f32_or_f64(kOp, "logits", logits);
  const int64_t n = logits.size(0), e = logits.size(1);
  if (k < 1 || k > e) UNILLM_THROW(ShapeError, "[moe_route] top-k of ", k, " over ", e, " experts");
  const std::vector<double> l = host_values(logits);
  std::vector<double> probs(l.size()), weights(static_cast<size_t>(n * k));
  std::vector<int32_t> experts(static_cast<size_t>(n * k));
  std::vector<int32_t> order(static_cast<size_t>(e));
  for (int64_t r = 0; r < n; ++r) {
    const double* lr = l.data() + r * e;
    double* p = probs.data() + r * e;
    const double mx = *std::max_element(lr, lr + e);
    double sum = 0;
    for (int64_t x = 0; x < e; ++x) sum += (p[x] = std::exp(lr[x] - mx));
    for (int64_t x = 0; x < e; ++x) p[x] /= sum;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [p](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    double chosen = 0;
    for (int64_t j = 0; j < k; ++j) chosen += p[order[static_cast<size_t>(j)]];
    for (int64_t j = 0; j < k; ++j) {
      const int32_t x = order[static_cast<size_t>(j)];
      experts[static_cast<size_t>(r * k + j)] = x;
      weights[static_cast<size_t>(r * k + j)] = normalize ? p[x] / chosen : p[x];
    }
  }
  MoeRouting out{from_values(weights, {n, k}, logits.dtype(), logits.device()), experts};
  if (balance && record) balance->record(probs, experts, k);
  if (autograd::needs_grad({logits})) {
    auto node = std::make_shared<MoeRouteNode>(std::move(probs), std::move(weights), experts, n, e, k, normalize,
                                               logits.dtype(), logits.device(), balance);
    autograd::record(node, {logits}, {&out.weights});
  }
  return out;
}

Tensor moe_combine(const Tensor& y_in, const Tensor& w_in, const Tensor& idx_in, int64_t rows) {
  constexpr const char* kOp = "moe_combine";
  check_defined(kOp, "y", y_in);
  check_ndim(kOp, "y", y_in, 2);
  check_f32_or_f64(kOp, "y", y_in);
  check_ndim(kOp, "w", w_in, 1);
  check_dtype(kOp, "w", w_in, y_in.dtype());
  check_ndim(kOp, "idx", idx_in, 1);
  check_dtype(kOp, "idx", idx_in, DType::i32);
  if (!idx_in.device().is_cpu()) UNILLM_THROW(DeviceError, "[moe_combine] idx must be on the CPU");
  const int64_t m = y_in.size(0);
  if (w_in.size(0) != m || idx_in.size(0) != m)
    UNILLM_THROW(ShapeError, "[moe_combine] y has ", m, " rows, w ", w_in.size(0), ", idx ", idx_in.size(0));
  Tensor y = y_in.contiguous(), w = w_in.contiguous(), idx = idx_in.contiguous();
  const int32_t* ip = idx.data<int32_t>();
  for (int64_t i = 0; i < m; ++i)
    if (ip[i] < 0 || ip[i] >= rows)
      UNILLM_THROW(ShapeError, "[moe_combine] idx[", i, "] = ", ip[i], " is outside [0, ", rows, ")");
  Tensor out = Tensor::empty({rows, y.size(1)}, y.dtype(), y.device());
  if (out.numel() > 0) {
    const Tensor dev_idx = idx.to(y.device());
    MoeCombineArgs a{nullptr, nullptr, nullptr, nullptr, m, rows, y.size(1), y.dtype()};
    KernelCall<MoeCombineArgs>(kOp, y.device(), y.dtype(), a)
        .in(y, &a.y).in(w, &a.w).in(dev_idx, &a.idx).out(out, &a.out).run(moe_combine_reference);
  }
  if (autograd::needs_grad({y_in, w_in})) {
    auto node = std::make_shared<MoeCombineNode>(y, w, idx, rows);
    autograd::record(node, {y_in, w_in, idx_in}, {&out});
  }
  return out;
}

void moe_combine_reference(const MoeCombineArgs& a) {
  if (a.dtype == DType::f64) return combine<double>(a);
  combine<float>(a);
}

void moe_combine_backward_reference(const MoeCombineBackwardArgs& a) {
  if (a.dtype == DType::f64) return combine_backward<double>(a);
  combine_backward<float>(a);
}

Tensor sigmoid(const Tensor& x) {
  check_defined("sigmoid", "x", x);
  check_f32_or_f64("sigmoid", "x", x);
  std::vector<double> v = host_values(x);
  for (double& a : v) a = 1.0 / (1.0 + std::exp(-a));
  Tensor out = from_values(v, x.shape(), x.dtype(), x.device());
  if (autograd::needs_grad({x})) autograd::record(std::make_shared<SigmoidNode>(out), {x}, {&out});
  return out;
}

}  // namespace unillm::ops
