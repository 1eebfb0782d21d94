// cast: the device kernel for the dtype pair, else the reference.
#include "ops/cast.h"

#include "ops/dispatch.h"
#include "ops/kernel_call.h"
#include "ops/plugin_args.h"

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
  // Keyed by the non-f32 side of a pair with f32 (the CPU has f32 <-> bf16/f16 kernels), else
  // by the destination dtype; a kernel reads both dtypes from the args.
  const bool f32_pair = x.dtype() == DType::f32 || to == DType::f32;
  const DType key = f32_pair ? (x.dtype() == DType::f32 ? to : x.dtype()) : to;
  KernelCall<CastArgs>("cast", x.device(), key, a).in(x, &a.src).out(out, &a.dst).run(cast_reference);
  return out;
}

}  // namespace unillm::ops
