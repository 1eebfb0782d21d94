// swiglu: silu(gate) * up from the fused gate/up projection (kernel key = dtype). Backward:
// SwigluNode saves gate_up and runs "swiglu_backward".
#include "ops/swiglu.h"

#include <cmath>

#include "autograd/node.h"
#include "ops/dispatch.h"
#include "ops/kernel_call.h"
#include "ops/plugin_args.h"

namespace unillm::ops {
namespace {

constexpr const char* kOp = "swiglu";

Tensor swiglu_forward(const Tensor& gu_in) {
  check_defined(kOp, "gate_up", gu_in);
  check_f32_or_f64(kOp, "gate_up", gu_in);
  if (gu_in.ndim() < 1 || gu_in.size(-1) % 2 != 0)
    UNILLM_THROW(ShapeError, "[swiglu] gate_up has shape ", shape_str(gu_in.shape()),
                 ", expected [.., 2F] (an even last dim)");
  Tensor gu = gu_in.contiguous();
  const int64_t ffn = gu.size(-1) / 2;
  Shape out_shape = gu.shape();
  out_shape.back() = ffn;
  Tensor out = Tensor::empty(out_shape, gu.dtype(), gu.device());
  if (out.numel() == 0) return out;
  SwigluArgs a{gu.raw_data(), out.raw_data(), out.numel() / ffn, ffn, gu.dtype()};
  KernelCall<SwigluArgs>(kOp, gu.device(), gu.dtype(), a)
      .in(gu, &a.gate_up).out(out, &a.out).run(swiglu_reference);
  return out;
}

class SwigluNode : public autograd::Node {
 public:
  explicit SwigluNode(const Tensor& gate_up) : gate_up_(autograd::SavedTensor::activation(gate_up)) {}
  std::string name() const override { return "SwigluNode"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    const Tensor& gu = gate_up_.get();
    Tensor dout = g[0].to(gu.dtype()).contiguous();
    Tensor dgu = Tensor::empty(gu.shape(), gu.dtype(), gu.device());
    if (dgu.numel() == 0) return {dgu};
    const int64_t ffn = gu.size(-1) / 2;
    SwigluBackwardArgs a{gu.raw_data(), dout.raw_data(), dgu.raw_data(), gu.numel() / (2 * ffn),
                         ffn, gu.dtype()};
    KernelCall<SwigluBackwardArgs>("swiglu_backward", gu.device(), gu.dtype(), a)
        .in(gu, &a.gate_up).in(dout, &a.dout).out(dgu, &a.dgate_up).run(swiglu_backward_reference);
    return {dgu};
  }
  void release_saved() override { gate_up_.release(); }

 private:
  autograd::SavedTensor gate_up_;  // contiguous [.., 2F]
};

}  // namespace

Tensor swiglu(const Tensor& gate_up) {
  Tensor out = swiglu_forward(gate_up);
  if (autograd::needs_grad({gate_up})) {
    auto node = std::make_shared<SwigluNode>(gate_up.contiguous());
    autograd::record(node, {gate_up}, {&out});
  }
  return out;
}

void swiglu_reference(const SwigluArgs& a) {
  for (int64_t r = 0; r < a.rows; ++r) {
    for (int64_t i = 0; i < a.ffn; ++i) {
      double g = load_scalar(a.gate_up, a.dtype, r * 2 * a.ffn + i);
      double u = load_scalar(a.gate_up, a.dtype, r * 2 * a.ffn + a.ffn + i);
      store_scalar(a.out, a.dtype, r * a.ffn + i, g / (1.0 + std::exp(-g)) * u);
    }
  }
}

void swiglu_backward_reference(const SwigluBackwardArgs& a) {
  for (int64_t r = 0; r < a.rows; ++r) {
    for (int64_t i = 0; i < a.ffn; ++i) {
      const int64_t gi = r * 2 * a.ffn + i, ui = gi + a.ffn;
      double g = load_scalar(a.gate_up, a.dtype, gi), u = load_scalar(a.gate_up, a.dtype, ui);
      double dy = load_scalar(a.dout, a.dtype, r * a.ffn + i);
      double s = 1.0 / (1.0 + std::exp(-g));
      store_scalar(a.dgate_up, a.dtype, gi, dy * u * s * (1.0 + g * (1.0 - s)));
      store_scalar(a.dgate_up, a.dtype, ui, dy * g * s);
    }
  }
}

}  // namespace unillm::ops
