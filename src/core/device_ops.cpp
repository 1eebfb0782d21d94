// Device copies and accumulation: the registered kernel, or the work done through the host.
#include "core/device_ops.h"

#include <type_traits>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/registry.h"

namespace unillm {

namespace {

// Elements spanned by a strided view (strides >= 0).
int64_t span(int32_t ndim, const int64_t* shape, const int64_t* strides) {
  int64_t last = 0;
  for (int32_t d = 0; d < ndim; ++d) {
    if (shape[d] == 0) return 0;
    last += (shape[d] - 1) * strides[d];
  }
  return last + 1;
}

void allow_fallback(const char* op, Device device, DType dtype) {
  KernelRegistry& reg = kernel_registry();
  if (reg.fallback() == KernelRegistry::Fallback::error)
    UNILLM_THROW(NotImplemented, "[", op, "] no kernel on ", device_name(device), " for dtype ",
                 dtype_name(dtype), ", and --device-fallback is error (warn runs it on the CPU)");
  reg.report_fallback(op, device.kind);
}

// Runs a plugin kernel of op when the device has one; false when it has none.
template <class Args>
bool run_plugin_kernel(const char* op, const Args& a, Device device, DType key) {
  using PluginFn = std::remove_pointer_t<unillm_kernel_fn>;
  auto* k = kernel_registry().find_exact<PluginFn>(op, device.kind, key);
  if (!k) return false;
  Backend& be = backend_for(device);
  const int32_t s = k(static_cast<unillm_stream>(be.stream(device.index)), &a, sizeof a);
  if (s != UNILLM_OK)
    UNILLM_THROW(DeviceError, "[", op, "] the ", device_name(device), " kernel failed (status ", s,
                 "): ", be.last_error());
  return true;
}

void copy_through_host(unillm_copy_args a, Device device) {
  DType sd, dd;
  UNILLM_CHECK(dtype_from_code(a.src_dtype, &sd) && dtype_from_code(a.dst_dtype, &dd), "[copy] dtype");
  allow_fallback("copy", device, dd);
  const size_t sb = static_cast<size_t>(span(a.ndim, a.shape, a.src_strides)) * dtype_size(sd);
  const size_t db = static_cast<size_t>(span(a.ndim, a.shape, a.dst_strides)) * dtype_size(dd);
  std::vector<char> src(sb), dst(db);
  copy_bytes(src.data(), Device{}, a.src, device, sb);
  copy_bytes(dst.data(), Device{}, a.dst, device, db);  // a strided dst keeps what lies between
  void* const dev_dst = a.dst;
  a.src = src.data();
  a.dst = dst.data();
  copy_elements_host(a);
  copy_bytes(dev_dst, device, dst.data(), Device{}, db);
}

}  // namespace

void copy_elements_host(const unillm_copy_args& a) {
  DType sd, dd;
  UNILLM_CHECK(dtype_from_code(a.src_dtype, &sd) && dtype_from_code(a.dst_dtype, &dd), "[copy] dtype");
  int64_t n = 1;
  for (int32_t d = 0; d < a.ndim; ++d) n *= a.shape[d];
  if (n == 0) return;
  const size_t se = dtype_size(sd), de = dtype_size(dd);
  std::vector<int64_t> idx(static_cast<size_t>(a.ndim), 0);
  int64_t so = 0, doff = 0;
  for (int64_t i = 0; i < n; ++i) {
    convert_elements(static_cast<const char*>(a.src) + so * static_cast<int64_t>(se), sd,
                     static_cast<char*>(a.dst) + doff * static_cast<int64_t>(de), dd, 1);
    for (int32_t d = a.ndim - 1; d >= 0; --d) {
      if (++idx[d] < a.shape[d]) {
        so += a.src_strides[d];
        doff += a.dst_strides[d];
        break;
      }
      so -= a.src_strides[d] * (a.shape[d] - 1);
      doff -= a.dst_strides[d] * (a.shape[d] - 1);
      idx[d] = 0;
    }
  }
}

void device_copy(const unillm_copy_args& a, Device device) {
  KernelRegistry& reg = kernel_registry();
  DType dd;
  UNILLM_CHECK(dtype_from_code(a.dst_dtype, &dd), "[copy] dtype");
  if (auto* k = reg.find_exact<CopyKernel>("copy", device.kind, dd)) return k(a);
  if (run_plugin_kernel("copy", a, device, dd)) return;
  if (device.is_cpu()) return copy_elements_host(a);
  copy_through_host(a, device);
}

void device_accumulate(const unillm_accumulate_args& a, Device device) {
  DType dt;
  UNILLM_CHECK(dtype_from_code(a.dtype, &dt) && (dt == DType::f32 || dt == DType::f64),
               "[accumulate] dtype");
  if (auto* k = kernel_registry().find_exact<AccumulateKernel>("accumulate", device.kind, dt)) return k(a);
  if (run_plugin_kernel("accumulate", a, device, dt)) return;
  allow_fallback("accumulate", device, dt);
  const size_t bytes = static_cast<size_t>(a.n) * dtype_size(dt);
  std::vector<char> src(bytes), dst(bytes);
  copy_bytes(src.data(), Device{}, a.src, device, bytes);
  copy_bytes(dst.data(), Device{}, a.dst, device, bytes);
  for (int64_t i = 0; i < a.n; ++i) {
    if (dt == DType::f32)
      reinterpret_cast<float*>(dst.data())[i] += reinterpret_cast<const float*>(src.data())[i];
    else
      reinterpret_cast<double*>(dst.data())[i] += reinterpret_cast<const double*>(src.data())[i];
  }
  copy_bytes(a.dst, device, dst.data(), Device{}, bytes);
}

}  // namespace unillm
