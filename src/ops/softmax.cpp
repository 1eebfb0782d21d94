// softmax over the last dim (kernel key = dtype). Backward (SoftmaxNode saving y) goes beside
// softmax_forward.
#include "ops/softmax.h"

#include <cmath>
#include <limits>

#include "ops/dispatch.h"

namespace unillm::ops {
namespace {

constexpr const char* kOp = "softmax";

Tensor softmax_forward(const Tensor& x_in) {
  check_defined(kOp, "x", x_in);
  check_f32_or_f64(kOp, "x", x_in);
  if (x_in.ndim() < 1) UNILLM_THROW(ShapeError, "[softmax] x is a scalar, expected [.., N]");
  Tensor x = x_in.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (y.numel() == 0) return y;
  const int64_t cols = x.size(-1);
  SoftmaxArgs a{x.raw_data(), y.raw_data(), x.numel() / cols, cols, x.dtype()};
  if (auto* kernel = find_kernel<SoftmaxKernel>(kOp, x, x.dtype()))
    kernel(a);
  else if (x.device().is_cpu())
    softmax_reference(a);
  else
    no_kernel(kOp, x, x.dtype());
  return y;
}

}  // namespace

Tensor softmax(const Tensor& x) { return softmax_forward(x); }

void softmax_reference(const SoftmaxArgs& a) {
  for (int64_t r = 0; r < a.rows; ++r) {
    const int64_t base = r * a.cols;
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t c = 0; c < a.cols; ++c) mx = std::max(mx, load_scalar(a.x, a.dtype, base + c));
    double sum = 0;
    for (int64_t c = 0; c < a.cols; ++c) sum += std::exp(load_scalar(a.x, a.dtype, base + c) - mx);
    for (int64_t c = 0; c < a.cols; ++c)
      store_scalar(a.y, a.dtype, base + c, std::exp(load_scalar(a.x, a.dtype, base + c) - mx) / sum);
  }
}

}  // namespace unillm::ops
