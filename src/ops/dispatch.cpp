// Shared op checks.
#include "ops/dispatch.h"

namespace unillm::ops {

void no_kernel(const char* op, const Tensor& t, DType dtype) {
  UNILLM_THROW(NotImplemented, "[", op, "] no kernel for device ", device_name(t.device()),
               " and dtype ", dtype_name(dtype), " (see `unillm env` for the coverage table)");
}

void check_dtype(const char* op, const char* arg, const Tensor& t, DType expected) {
  if (t.dtype() != expected)
    UNILLM_THROW(DTypeError, "[", op, "] ", arg, " has dtype ", dtype_name(t.dtype()), ", expected ",
                 dtype_name(expected));
}

void check_ndim(const char* op, const char* arg, const Tensor& t, int ndim) {
  if (t.ndim() != ndim)
    UNILLM_THROW(ShapeError, "[", op, "] ", arg, " has shape ", shape_str(t.shape()), ", expected ",
                 ndim, " dims");
}

void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  if (!(a.device() == b.device()))
    UNILLM_THROW(DeviceError, "[", op, "] tensors on ", device_name(a.device()), " and ",
                 device_name(b.device()));
}

void check_f32_or_f64(const char* op, const char* arg, const Tensor& t) {
  if (t.dtype() != DType::f32 && t.dtype() != DType::f64)
    UNILLM_THROW(DTypeError, "[", op, "] ", arg, " has dtype ", dtype_name(t.dtype()),
                 ", expected f32 or f64");
}

void check_defined(const char* op, const char* arg, const Tensor& t) {
  if (!t.defined()) UNILLM_THROW(ShapeError, "[", op, "] ", arg, " is undefined");
}

}  // namespace unillm::ops
