// rms_norm (HF LlamaRMSNorm): checks, allocation and dispatch (kernel key = the weight's dtype).
// Backward (RmsNormNode saving x and the per-row 1/rms) goes beside rms_norm_forward.
#include "ops/rms_norm.h"

#include <cmath>

#include "ops/dispatch.h"

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
  if (auto* kernel = find_kernel<RmsNormKernel>(kOp, w, w.dtype()))
    kernel(a);
  else if (x.device().is_cpu())
    rms_norm_reference(a);
  else
    no_kernel(kOp, w, w.dtype());
  return y;
}

}  // namespace

Tensor rms_norm(const Tensor& x, const Tensor& w, float eps) { return rms_norm_forward(x, w, eps); }

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

}  // namespace unillm::ops
