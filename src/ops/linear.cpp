// linear: y = x · Wᵀ (+ b). Checks, output allocation and dispatch (kernel key = W's dtype);
// the naive double-accumulation reference is the CPU fallback. Backward: LinearNode saves x (when
// W needs grad) and W (when x needs grad) and runs the "linear_backward" kernel. A kGradOnly call
// records the same node and skips the forward kernel.
#include "ops/linear.h"

#include "autograd/node.h"
#include "ops/dispatch.h"
#include "ops/kernel_call.h"
#include "ops/plugin_args.h"

namespace unillm::ops {
namespace {

constexpr const char* kOp = "linear";

void check_linear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  check_defined(kOp, "x", x);
  check_defined(kOp, "weight", w);
  check_f32_or_f64(kOp, "x", x);
  check_ndim(kOp, "weight", w, 2);
  if (x.ndim() < 1) UNILLM_THROW(ShapeError, "[linear] x is a scalar, expected [.., K]");
  check_same_device(kOp, x, w);
  if (w.size(1) != x.size(-1))
    UNILLM_THROW(ShapeError, "[linear] weight has shape ", shape_str(w.shape()), ", expected [N, ",
                 x.size(-1), "] for x of shape ", shape_str(x.shape()));
  bool w_ok = x.dtype() == DType::f64
                  ? w.dtype() == DType::f64
                  : (w.dtype() == DType::f32 || w.dtype() == DType::bf16 || w.dtype() == DType::f16);
  if (!w_ok)
    UNILLM_THROW(DTypeError, "[linear] weight has dtype ", dtype_name(w.dtype()), " with x ",
                 dtype_name(x.dtype()), ", expected ",
                 x.dtype() == DType::f64 ? "f64" : "f32, bf16 or f16");
  if (!bias.defined()) return;
  check_same_device(kOp, x, bias);
  check_dtype(kOp, "bias", bias, x.dtype());
  if (bias.ndim() != 1 || bias.size(0) != w.size(0))
    UNILLM_THROW(ShapeError, "[linear] bias has shape ", shape_str(bias.shape()), ", expected [",
                 w.size(0), "]");
}

Tensor linear_forward(const Tensor& x_in, const Tensor& w_in, const Tensor& bias_in,
                      OutputUse use) {
  check_linear(x_in, w_in, bias_in);
  Shape out_shape = x_in.shape();
  out_shape.back() = w_in.size(0);
  // Zeros rather than uninitialised memory: the discarded value still flows through the
  // residual add, and garbage (denormals, NaNs) there would only cost time and confuse debugging.
  if (use == OutputUse::kGradOnly) return Tensor::zeros(out_shape, x_in.dtype(), x_in.device());
  Tensor x = x_in.contiguous(), w = w_in.contiguous();
  Tensor bias = bias_in.defined() ? bias_in.contiguous() : Tensor();
  const int64_t k = w.size(1), n = w.size(0), m = x.numel() / (k > 0 ? k : 1);
  Tensor y = Tensor::empty(out_shape, x.dtype(), x.device());
  if (y.numel() == 0) return y;
  if (k == 0) {  // empty reduction: y = b or 0
    UNILLM_CHECK(y.device().is_cpu(), "[linear] K = 0 only on the CPU");
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        store_scalar(y.raw_data(), y.dtype(), i * n + j,
                     bias.defined() ? load_scalar(bias.raw_data(), bias.dtype(), j) : 0.0);
    return y;
  }
  LinearArgs a{x.raw_data(), w.raw_data(), bias.defined() ? bias.raw_data() : nullptr,
               y.raw_data(), m, k, n, x.dtype(), w.dtype()};
  KernelCall<LinearArgs>(kOp, w.device(), w.dtype(), a)
      .in(x, &a.x).in(w, &a.w).in(bias, &a.bias).out(y, &a.y).run(linear_reference);
  return y;
}

class LinearNode : public autograd::Node {
 public:
  LinearNode(const Tensor& x, const Tensor& w, bool save_x, bool save_w, bool has_bias)
      : x_(autograd::SavedTensor::activation(save_x ? x : Tensor())), w_(save_w ? w : Tensor()), x_shape_(x.shape()),
        x_dtype_(x.dtype()), w_dtype_(w.dtype()), n_(w.size(0)), has_bias_(has_bias) {}
  std::string name() const override { return "LinearNode"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override;
  void release_saved() override {
    x_.release();
    w_.release();
  }

 private:
  autograd::SavedTensor x_, w_;  // contiguous x [.., K] and W [N, K], each only when needed
  Shape x_shape_;
  DType x_dtype_, w_dtype_;
  int64_t n_;
  bool has_bias_;
};

std::vector<Tensor> LinearNode::backward(const std::vector<Tensor>& g) {
  const int64_t k = x_shape_.back(), m = shape_numel(x_shape_) / (k > 0 ? k : 1);
  Tensor dy = g[0].to(x_dtype_).contiguous();  // [M, N]
  Tensor dx, dw, db;
  const Tensor& w = needs_input_grad(0) ? w_.get() : Tensor();
  const Tensor& x = needs_input_grad(1) ? x_.get() : Tensor();
  if (needs_input_grad(0)) dx = Tensor::empty(x_shape_, x_dtype_, dy.device());
  if (needs_input_grad(1)) dw = Tensor::empty({n_, k}, master_grad_dtype(w_dtype_), dy.device());
  if (has_bias_ && needs_input_grad(2)) db = Tensor::empty({n_}, x_dtype_, dy.device());
  if (m * k == 0 || n_ == 0) {  // empty products: zero gradients
    for (Tensor* t : {&dx, &dw, &db})
      if (t->defined()) t->fill(0.0);
  } else {
    LinearBackwardArgs a{dy.raw_data(), x.defined() ? x.raw_data() : nullptr,
                         w.defined() ? w.raw_data() : nullptr, dx.defined() ? dx.raw_data() : nullptr,
                         dw.defined() ? dw.raw_data() : nullptr, db.defined() ? db.raw_data() : nullptr,
                         m, k, n_, x_dtype_, w_dtype_};
    KernelCall<LinearBackwardArgs>("linear_backward", dy.device(), w_dtype_, a)
        .in(dy, &a.dy).in(x, &a.x).in(w, &a.w).out(dx, &a.dx).out(dw, &a.dw).out(db, &a.db)
        .run(linear_backward_reference);
  }
  std::vector<Tensor> out{dx, dw};
  if (has_bias_) out.push_back(db);
  return out;
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias, OutputUse use) {
  Tensor y = linear_forward(x, w, bias, use);
  std::vector<Tensor> inputs{x, w};
  if (bias.defined()) inputs.push_back(bias);
  if (autograd::needs_grad(inputs)) {
    const bool x_grad = autograd::needs_grad({x}), w_grad = autograd::needs_grad({w});
    auto node = std::make_shared<LinearNode>(x.contiguous(), w.contiguous(), w_grad, x_grad,
                                             bias.defined());
    autograd::record(node, inputs, {&y});
  }
  return y;
}

void linear_reference(const LinearArgs& a) {
  for (int64_t i = 0; i < a.m; ++i) {
    for (int64_t j = 0; j < a.n; ++j) {
      double s = a.bias ? load_scalar(a.bias, a.x_dtype, j) : 0.0;
      for (int64_t p = 0; p < a.k; ++p)
        s += load_scalar(a.x, a.x_dtype, i * a.k + p) * load_scalar(a.w, a.w_dtype, j * a.k + p);
      store_scalar(a.y, a.x_dtype, i * a.n + j, s);
    }
  }
}

void linear_backward_reference(const LinearBackwardArgs& a) {
  const DType gw = master_grad_dtype(a.w_dtype);
  for (int64_t i = 0; a.dx && i < a.m; ++i)
    for (int64_t p = 0; p < a.k; ++p) {
      double s = 0;
      for (int64_t j = 0; j < a.n; ++j)
        s += load_scalar(a.dy, a.x_dtype, i * a.n + j) * load_scalar(a.w, a.w_dtype, j * a.k + p);
      store_scalar(a.dx, a.x_dtype, i * a.k + p, s);
    }
  for (int64_t j = 0; a.dw && j < a.n; ++j)
    for (int64_t p = 0; p < a.k; ++p) {
      double s = 0;
      for (int64_t i = 0; i < a.m; ++i)
        s += load_scalar(a.dy, a.x_dtype, i * a.n + j) * load_scalar(a.x, a.x_dtype, i * a.k + p);
      store_scalar(a.dw, gw, j * a.k + p, s);
    }
  for (int64_t j = 0; a.db && j < a.n; ++j) {
    double s = 0;
    for (int64_t i = 0; i < a.m; ++i) s += load_scalar(a.dy, a.x_dtype, i * a.n + j);
    store_scalar(a.db, a.x_dtype, j, s);
  }
}

}  // namespace unillm::ops
