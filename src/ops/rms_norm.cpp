// rms_norm (HF LlamaRMSNorm): checks, allocation and dispatch (kernel key = the weight's dtype).
// Backward: RmsNormNode saves x and w (the per-row 1/rms is recomputed, one pass over a row the
// kernel reads anyway) and runs "rms_norm_backward".
#include "ops/rms_norm.h"

#include <cmath>
#include <vector>

#include "autograd/node.h"
#include "ops/dispatch.h"
#include "ops/kernel_call.h"
#include "ops/plugin_args.h"

namespace unillm::ops {
namespace {

constexpr const char* kOp = "rms_norm";

void check_rms_norm(const Tensor& x, const Tensor& w) {
  check_defined(kOp, "x", x);
  check_defined(kOp, "weight", w);
  check_f32_or_f64(kOp, "x", x);
  check_same_device(kOp, x, w);
  if (x.ndim() < 1) UNILLM_THROW(ShapeError, "[rms_norm] x is a scalar, expected [.., C]");
  if (w.ndim() != 1 || w.numel() != x.size(-1))
    UNILLM_THROW(ShapeError, "[rms_norm] weight has ", w.numel(), " elements, expected ",
                 x.size(-1));
  bool w_ok = x.dtype() == DType::f64
                  ? w.dtype() == DType::f64
                  : (w.dtype() == DType::f32 || w.dtype() == DType::bf16 || w.dtype() == DType::f16);
  if (!w_ok)
    UNILLM_THROW(DTypeError, "[rms_norm] weight has dtype ", dtype_name(w.dtype()), " with x ",
                 dtype_name(x.dtype()), ", expected ",
                 x.dtype() == DType::f64 ? "f64" : "f32, bf16 or f16");
}

Tensor rms_norm_forward(const Tensor& x_in, const Tensor& w_in, float eps) {
  check_rms_norm(x_in, w_in);
  Tensor x = x_in.contiguous(), w = w_in.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  const int64_t dim = x.size(-1);
  if (y.numel() == 0) return y;
  RmsNormArgs a{x.raw_data(), w.raw_data(), y.raw_data(), x.numel() / dim, dim,
                eps, x.dtype(), w.dtype()};
  KernelCall<RmsNormArgs>(kOp, w.device(), w.dtype(), a)
      .in(x, &a.x).in(w, &a.w).out(y, &a.y).run(rms_norm_reference);
  return y;
}

class RmsNormNode : public autograd::Node {
 public:
  RmsNormNode(const Tensor& x, const Tensor& w, float eps) : x_(autograd::SavedTensor::activation(x)), w_(w), eps_(eps) {}
  std::string name() const override { return "RmsNormNode"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    const Tensor &x = x_.get(), &w = w_.get();
    Tensor dy = g[0].to(x.dtype()).contiguous();
    Tensor dx = needs_input_grad(0) ? Tensor::empty(x.shape(), x.dtype(), x.device()) : Tensor();
    Tensor dw = needs_input_grad(1)
                    ? Tensor::empty(w.shape(), master_grad_dtype(w.dtype()), w.device())
                    : Tensor();
    const int64_t dim = w.numel();
    if (x.numel() == 0) {
      if (dw.defined()) dw.fill(0.0);
      return {dx, dw};
    }
    RmsNormBackwardArgs a{dy.raw_data(), x.raw_data(), w.raw_data(),
                          dx.defined() ? dx.raw_data() : nullptr,
                          dw.defined() ? dw.raw_data() : nullptr,
                          x.numel() / dim, dim, eps_, x.dtype(), w.dtype()};
    KernelCall<RmsNormBackwardArgs>("rms_norm_backward", w.device(), w.dtype(), a)
        .in(dy, &a.dy).in(x, &a.x).in(w, &a.w).out(dx, &a.dx).out(dw, &a.dw)
        .run(rms_norm_backward_reference);
    return {dx, dw};
  }
  void release_saved() override {
    x_.release();
    w_.release();
  }

 private:
  autograd::SavedTensor x_, w_;  // contiguous x [.., C], w [C]
  float eps_;
};

}  // namespace

Tensor rms_norm(const Tensor& x, const Tensor& w, float eps) {
  Tensor y = rms_norm_forward(x, w, eps);
  if (autograd::needs_grad({x, w})) {
    auto node = std::make_shared<RmsNormNode>(x.contiguous(), w.contiguous(), eps);
    autograd::record(node, {x, w}, {&y});
  }
  return y;
}

void rms_norm_reference(const RmsNormArgs& a) {
  for (int64_t r = 0; r < a.rows; ++r) {
    const int64_t base = r * a.dim;
    double ss = 0;
    for (int64_t c = 0; c < a.dim; ++c) {
      double v = load_scalar(a.x, a.x_dtype, base + c);
      ss += v * v;
    }
    double inv = 1.0 / std::sqrt(ss / static_cast<double>(a.dim) + a.eps);
    for (int64_t c = 0; c < a.dim; ++c)
      store_scalar(a.y, a.x_dtype, base + c,
                   load_scalar(a.x, a.x_dtype, base + c) * inv * load_scalar(a.w, a.w_dtype, c));
  }
}

void rms_norm_backward_reference(const RmsNormBackwardArgs& a) {
  const DType gw = master_grad_dtype(a.w_dtype);
  std::vector<double> dw(static_cast<size_t>(a.dim), 0.0);
  for (int64_t r = 0; r < a.rows; ++r) {
    const int64_t base = r * a.dim;
    double ss = 0, dot = 0;  // Σ x², Σ g·w·x
    for (int64_t c = 0; c < a.dim; ++c) {
      double x = load_scalar(a.x, a.x_dtype, base + c);
      ss += x * x;
      dot += load_scalar(a.dy, a.x_dtype, base + c) * load_scalar(a.w, a.w_dtype, c) * x;
    }
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(a.dim) + a.eps);
    const double k = dot * inv * inv * inv / static_cast<double>(a.dim);
    for (int64_t c = 0; c < a.dim; ++c) {
      double x = load_scalar(a.x, a.x_dtype, base + c), g = load_scalar(a.dy, a.x_dtype, base + c);
      if (a.dx) store_scalar(a.dx, a.x_dtype, base + c, inv * g * load_scalar(a.w, a.w_dtype, c) - x * k);
      dw[c] += g * x * inv;
    }
  }
  for (int64_t c = 0; a.dw && c < a.dim; ++c) store_scalar(a.dw, gw, c, dw[c]);
}

}  // namespace unillm::ops
