// swiglu: silu(gate) * up from the fused gate/up projection (kernel key = dtype). Backward
// (SwigluNode saving gate_up) goes beside swiglu_forward.
#include "ops/swiglu.h"

#include <cmath>

#include "ops/dispatch.h"

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
  if (auto* kernel = find_kernel<SwigluKernel>(kOp, gu, gu.dtype()))
    kernel(a);
  else if (gu.device().is_cpu())
    swiglu_reference(a);
  else
    no_kernel(kOp, gu, gu.dtype());
  return out;
}

}  // namespace

Tensor swiglu(const Tensor& gate_up) { return swiglu_forward(gate_up); }

void swiglu_reference(const SwigluArgs& a) {
  for (int64_t r = 0; r < a.rows; ++r) {
    for (int64_t i = 0; i < a.ffn; ++i) {
      double g = load_scalar(a.gate_up, a.dtype, r * 2 * a.ffn + i);
      double u = load_scalar(a.gate_up, a.dtype, r * 2 * a.ffn + a.ffn + i);
      store_scalar(a.out, a.dtype, r * a.ffn + i, g / (1.0 + std::exp(-g)) * u);
    }
  }
}

}  // namespace unillm::ops
