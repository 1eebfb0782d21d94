// softmax over the last dim (kernel key = dtype). Backward: SoftmaxNode saves y and runs
// "softmax_backward".
#include "ops/softmax.h"

#include <cmath>
#include <limits>

#include "autograd/node.h"
#include "ops/dispatch.h"
#include "ops/kernel_call.h"
#include "ops/plugin_args.h"

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
  KernelCall<SoftmaxArgs>(kOp, x.device(), x.dtype(), a).in(x, &a.x).out(y, &a.y).run(softmax_reference);
  return y;
}

class SoftmaxNode : public autograd::Node {
 public:
  explicit SoftmaxNode(const Tensor& y) : y_(autograd::SavedTensor::activation(y)) {}
  std::string name() const override { return "SoftmaxNode"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    const Tensor& y = y_.get();
    Tensor dy = g[0].to(y.dtype()).contiguous();
    Tensor dx = Tensor::empty(y.shape(), y.dtype(), y.device());
    if (dx.numel() == 0) return {dx};
    const int64_t cols = y.size(-1);
    SoftmaxBackwardArgs a{y.raw_data(), dy.raw_data(), dx.raw_data(), y.numel() / cols, cols,
                          y.dtype()};
    KernelCall<SoftmaxBackwardArgs>("softmax_backward", y.device(), y.dtype(), a)
        .in(y, &a.y).in(dy, &a.dy).out(dx, &a.dx).run(softmax_backward_reference);
    return {dx};
  }
  void release_saved() override { y_.release(); }

 private:
  autograd::SavedTensor y_;  // [.., N], the output (saved detached)
};

}  // namespace

Tensor softmax(const Tensor& x) {
  Tensor y = softmax_forward(x);
  if (autograd::needs_grad({x})) {
    auto node = std::make_shared<SoftmaxNode>(y);
    autograd::record(node, {x}, {&y});
  }
  return y;
}

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

void softmax_backward_reference(const SoftmaxBackwardArgs& a) {
  for (int64_t r = 0; r < a.rows; ++r) {
    const int64_t base = r * a.cols;
    double dot = 0;
    for (int64_t c = 0; c < a.cols; ++c)
      dot += load_scalar(a.y, a.dtype, base + c) * load_scalar(a.dy, a.dtype, base + c);
    for (int64_t c = 0; c < a.cols; ++c)
      store_scalar(a.dx, a.dtype, base + c,
                   load_scalar(a.y, a.dtype, base + c) * (load_scalar(a.dy, a.dtype, base + c) - dot));
  }
}

}  // namespace unillm::ops
