// linear: y = x · Wᵀ (+ b). Checks, output allocation and dispatch (kernel key = W's dtype);
// the naive double-accumulation reference is the CPU fallback. Backward (LinearNode saving x and
// W) goes beside linear_forward in the backward issue.
#include "ops/linear.h"

#include "ops/dispatch.h"

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

Tensor linear_forward(const Tensor& x_in, const Tensor& w_in, const Tensor& bias_in) {
  check_linear(x_in, w_in, bias_in);
  Tensor x = x_in.contiguous(), w = w_in.contiguous();
  Tensor bias = bias_in.defined() ? bias_in.contiguous() : Tensor();
  const int64_t k = w.size(1), n = w.size(0), m = x.numel() / (k > 0 ? k : 1);
  Shape out_shape = x.shape();
  out_shape.back() = n;
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
  if (auto* kernel = find_kernel<LinearKernel>(kOp, w, w.dtype()))
    kernel(a);
  else if (w.device().is_cpu())
    linear_reference(a);
  else
    no_kernel(kOp, w, w.dtype());
  return y;
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  return linear_forward(x, w, bias);
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

}  // namespace unillm::ops
