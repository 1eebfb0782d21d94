// label_smoothing_term: forward and backward on host copies, in double, row order (deterministic).
#include "ops/label_smoothing.h"

#include <vector>

#include "autograd/node.h"
#include "core/error.h"
#include "ops/cross_entropy.h"

namespace unillm::ops {
namespace {

// The host f32 copies of x and W, W's mean row and which rows are labelled.
struct Parts {
  Tensor x, w;  // f32, CPU, contiguous
  std::vector<int32_t> labels;
  std::vector<double> mean_row;  // [C]
};

Parts host_parts(const Tensor& x, const Tensor& w, const Tensor& labels) {
  if (x.ndim() != 2 || w.ndim() != 2 || x.size(1) != w.size(1) || labels.ndim() != 1 || labels.size(0) != x.size(0) ||
      labels.dtype() != DType::i32)
    UNILLM_THROW(ShapeError, "[label_smoothing] x [N, C], W [V, C] and i32 labels [N] expected");
  Parts p;
  p.x = x.to(Device{}).to(DType::f32).contiguous();
  p.w = w.to(Device{}).to(DType::f32).contiguous();
  const Tensor lab = labels.to(Device{}).contiguous();
  const int64_t n = x.size(0), c = x.size(1), v = w.size(0);
  p.labels.assign(lab.data<int32_t>(), lab.data<int32_t>() + n);
  for (int64_t i = 0; i < n; ++i)
    if (p.labels[i] != kIgnoreIndex && (p.labels[i] < 0 || p.labels[i] >= v))
      UNILLM_THROW(ShapeError, "[label_smoothing] label ", p.labels[i], " of row ", i, " is outside [0, ", v, ")");
  p.mean_row.assign(static_cast<size_t>(c), 0.0);
  const float* wd = p.w.data<float>();
  for (int64_t r = 0; r < v; ++r)
    for (int64_t k = 0; k < c; ++k) p.mean_row[k] += wd[r * c + k];
  for (double& m : p.mean_row) m /= static_cast<double>(v);
  return p;
}

class LabelSmoothingNode : public autograd::Node {
 public:
  LabelSmoothingNode(Parts p, double epsilon, Tensor x_like, Tensor w_like)
      : p_(std::move(p)), eps_(epsilon), x_like_(std::move(x_like)), w_like_(std::move(w_like)) {}
  std::string name() const override { return "LabelSmoothingNode"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    const double ge = g[0].item_flat(0) * eps_;
    const int64_t n = p_.x.size(0), c = p_.x.size(1), v = p_.w.size(0);
    const float *xd = p_.x.data<float>(), *wd = p_.w.data<float>();
    Tensor dx, dw;
    if (needs_input_grad(0)) {
      std::vector<float> d(static_cast<size_t>(n * c), 0.0f);
      for (int64_t i = 0; i < n; ++i)
        if (p_.labels[i] != kIgnoreIndex)
          for (int64_t k = 0; k < c; ++k)
            d[i * c + k] = static_cast<float>(ge * (wd[p_.labels[i] * c + k] - p_.mean_row[k]));
      dx = Tensor::from_vector(d, {n, c}).to(x_like_.dtype()).to(x_like_.device());
    }
    if (needs_input_grad(1)) {
      std::vector<double> d(static_cast<size_t>(v * c), 0.0), xsum(static_cast<size_t>(c), 0.0);
      for (int64_t i = 0; i < n; ++i) {
        if (p_.labels[i] == kIgnoreIndex) continue;
        for (int64_t k = 0; k < c; ++k) {
          d[p_.labels[i] * c + k] += ge * xd[i * c + k];
          xsum[k] += xd[i * c + k];
        }
      }
      std::vector<float> f(d.size());
      for (int64_t r = 0; r < v; ++r)
        for (int64_t k = 0; k < c; ++k)
          f[r * c + k] = static_cast<float>(d[r * c + k] - ge * xsum[k] / static_cast<double>(v));
      dw = Tensor::from_vector(f, {v, c}).to(w_like_.device());
    }
    return {dx, dw, Tensor()};
  }
  void release_saved() override { p_ = Parts{}; }

 private:
  Parts p_;
  double eps_;
  Tensor x_like_, w_like_;  // empty tensors of x's and W's dtype and device
};

}  // namespace

Tensor label_smoothing_term(const Tensor& x, const Tensor& w, const Tensor& labels, double epsilon) {
  Parts p = host_parts(x, w, labels);
  const int64_t n = x.size(0), c = x.size(1);
  const float *xd = p.x.data<float>(), *wd = p.w.data<float>();
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (p.labels[i] == kIgnoreIndex) continue;
    for (int64_t k = 0; k < c; ++k) sum += static_cast<double>(xd[i * c + k]) * (wd[p.labels[i] * c + k] - p.mean_row[k]);
  }
  Tensor out = Tensor::empty({}, x.dtype(), x.device());
  out.fill(epsilon * sum);
  if (autograd::needs_grad({x, w}))
    autograd::record(std::make_shared<LabelSmoothingNode>(std::move(p), epsilon, Tensor::empty({0}, x.dtype(), x.device()),
                                                          Tensor::empty({0}, w.dtype(), w.device())),
                     {x, w, labels}, {&out});
  return out;
}

}  // namespace unillm::ops
