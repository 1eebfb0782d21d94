// add_rms_norm: the fused path (no gradient needed, f32, a kernel on the device) or the composed
// ops::add + ops::rms_norm, which also carry the backward.
#include "ops/add_rms_norm.h"

#include <cmath>

#include "autograd/node.h"
#include "core/registry.h"
#include "ops/dispatch.h"
#include "ops/elementwise.h"
#include "ops/kernel_call.h"
#include "ops/rms_norm.h"

namespace unillm::ops {
namespace {
constexpr const char* kOp = "add_rms_norm";
}  // namespace

AddRmsNormResult add_rms_norm(const Tensor& x, const Tensor& delta, const Tensor& w, float eps) {
  check_defined(kOp, "x", x);
  check_defined(kOp, "delta", delta);
  check_defined(kOp, "weight", w);
  const bool fused = !autograd::needs_grad({x, delta, w}) && x.dtype() == DType::f32 &&
                     delta.dtype() == DType::f32 && x.shape() == delta.shape() && x.ndim() >= 1 &&
                     w.ndim() == 1 && w.numel() == x.size(-1) &&
                     x.device() == delta.device() && x.device() == w.device() &&
                     (x.device().is_cpu() ||
                      kernel_registry().find_exact<AddRmsNormKernel>(kOp, w.device().kind, w.dtype()));
  if (!fused) {  // the composed ops check the arguments and record the gradient
    Tensor sum = add(x, delta);
    return {sum, rms_norm(sum, w, eps)};
  }
  Tensor xc = x.contiguous(), dc = delta.contiguous(), wc = w.contiguous();
  AddRmsNormResult r{Tensor::empty(x.shape(), DType::f32, x.device()),
                     Tensor::empty(x.shape(), DType::f32, x.device())};
  if (x.numel() == 0) return r;
  const int64_t dim = x.size(-1);
  AddRmsNormArgs a{xc.data<float>(), dc.data<float>(), wc.raw_data(), r.sum.data<float>(), r.y.data<float>(),
                   x.numel() / dim, dim, eps, w.dtype()};
  KernelCall<AddRmsNormArgs>(kOp, w.device(), w.dtype(), a)
      .in(xc, &a.x).in(dc, &a.delta).in(wc, &a.w).out(r.sum, &a.sum).out(r.y, &a.y)
      .run(add_rms_norm_reference);
  return r;
}

void add_rms_norm_reference(const AddRmsNormArgs& a) {
  for (int64_t r = 0; r < a.rows; ++r) {
    const int64_t base = r * a.dim;
    double ss = 0;
    for (int64_t c = 0; c < a.dim; ++c) {
      a.sum[base + c] = a.x[base + c] + a.delta[base + c];
      ss += static_cast<double>(a.sum[base + c]) * a.sum[base + c];
    }
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(a.dim) + a.eps);
    for (int64_t c = 0; c < a.dim; ++c)
      a.y[base + c] = static_cast<float>(a.sum[base + c] * inv * load_scalar(a.w, a.w_dtype, c));
  }
}

}  // namespace unillm::ops
