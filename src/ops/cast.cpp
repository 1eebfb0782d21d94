// cast: dispatch to the device kernel for the (f32, 2-byte dtype) pair, else the reference.
#include "ops/cast.h"

#include "ops/dispatch.h"

namespace unillm::ops {

void cast_reference(const CastArgs& a) {
  convert_elements(a.src, a.src_dtype, a.dst, a.dst_dtype, static_cast<size_t>(a.n));
}

Tensor cast(const Tensor& x_in, DType to) {
  check_defined("cast", "x", x_in);
  if (x_in.dtype() == to) return x_in;
  Tensor x = x_in.contiguous();
  Tensor out = Tensor::empty(x.shape(), to, x.device());
  CastArgs a{x.raw_data(), x.dtype(), out.raw_data(), to, x.numel()};
  const bool f32_pair = x.dtype() == DType::f32 || to == DType::f32;
  const DType low = x.dtype() == DType::f32 ? to : x.dtype();
  auto* kernel = f32_pair && (low == DType::bf16 || low == DType::f16) ? find_kernel<CastKernel>("cast", x, low) : nullptr;
  if (kernel)
    kernel(a);
  else if (x.device().is_cpu())
    cast_reference(a);
  else
    no_kernel("cast", x, low);
  return out;
}

}  // namespace unillm::ops
