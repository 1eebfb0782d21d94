// add / mul on same-shape, same-dtype f32/f64 tensors (kernel key = dtype). Backward (identity for
// add, the other operand for mul) goes beside binary_forward.
#include "ops/elementwise.h"

#include "ops/dispatch.h"

namespace unillm::ops {
namespace {

using Reference = void (*)(const BinaryArgs&);

Tensor binary_forward(const char* op, const Tensor& a_in, const Tensor& b_in, Reference ref) {
  check_defined(op, "a", a_in);
  check_defined(op, "b", b_in);
  check_f32_or_f64(op, "a", a_in);
  check_dtype(op, "b", b_in, a_in.dtype());
  check_same_device(op, a_in, b_in);
  if (a_in.shape() != b_in.shape())
    UNILLM_THROW(ShapeError, "[", op, "] b has shape ", shape_str(b_in.shape()), ", expected ",
                 shape_str(a_in.shape()), " (no broadcasting)");
  Tensor a = a_in.contiguous(), b = b_in.contiguous();
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  if (out.numel() == 0) return out;
  BinaryArgs args{a.raw_data(), b.raw_data(), out.raw_data(), a.numel(), a.dtype()};
  if (auto* kernel = find_kernel<BinaryKernel>(op, a, a.dtype()))
    kernel(args);
  else if (a.device().is_cpu())
    ref(args);
  else
    no_kernel(op, a, a.dtype());
  return out;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return binary_forward("add", a, b, &add_reference); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary_forward("mul", a, b, &mul_reference); }

void add_reference(const BinaryArgs& a) {
  for (int64_t i = 0; i < a.n; ++i)
    store_scalar(a.out, a.dtype, i, load_scalar(a.a, a.dtype, i) + load_scalar(a.b, a.dtype, i));
}

void mul_reference(const BinaryArgs& a) {
  for (int64_t i = 0; i < a.n; ++i)
    store_scalar(a.out, a.dtype, i, load_scalar(a.a, a.dtype, i) * load_scalar(a.b, a.dtype, i));
}

}  // namespace unillm::ops
