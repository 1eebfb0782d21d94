// Shared op checks.
#include "ops/dispatch.h"

#include "ops/kernel_call.h"

namespace unillm::ops {

void no_kernel_for(const char* op, Device device, DType dtype) {
  UNILLM_THROW(NotImplemented, "[", op, "] no kernel for device ", device_name(device),
               " and dtype ", dtype_name(dtype), " (see `unillm env --kernels`)");
}

void check_plugin_status(int32_t status, const char* op, Device device) {
  if (status == 0) return;
  const std::string why = backend_for(device).last_error();
  UNILLM_THROW(DeviceError, "[", op, "] the ", device_name(device), " kernel failed (status ",
               status, "): ", why.empty() ? "no message" : why);
}

void fallback_refused(const char* op, Device device, DType dtype) {
  UNILLM_THROW(NotImplemented, "[", op, "] no kernel on ", device_name(device), " for dtype ",
               dtype_name(dtype), ", and --device-fallback is error (warn runs it on the CPU)");
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
