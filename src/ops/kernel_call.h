// One kernel call of an op, the one place that decides what runs: the device's kernel for
// (op, device kind, dtype); on the CPU the op's reference when no kernel is registered; on
// another device without the kernel, the CPU kernel (or reference) on host copies of the bound
// tensors, reported once per op (KernelRegistry::Fallback::warn) or refused (error). An op fills
// its typed args, binds every tensor whose pointer the args carry, and calls run():
//
//   RmsNormArgs a{...};
//   KernelCall<RmsNormArgs>(kOp, w.device(), w.dtype(), a).in(x, &a.x).in(w, &a.w)
//       .out(y, &a.y).run(rms_norm_reference);
//
// Bound tensors must be contiguous; a field is null when bound, or points into its tensor (a
// sub-block: the offset is kept on the host copy). `out` is overwritten whole; `inout` is read too (accumulated into,
// or written in part).
// Plugin kernels take the op's ABI argument struct: an op makes them reachable by specialising
// PluginArgs<Args> (kernel_args.h); without it a plugin device always takes the host fallback.
#pragma once

#include <array>
#include <cstddef>
#include <type_traits>

#include "core/registry.h"
#include "core/tensor.h"
#include "unillm/device_plugin.h"

namespace unillm::ops {

template <class Args>
struct PluginArgs {
  static constexpr bool available = false;
};

// Throws NotImplemented naming the op, device and dtype (no kernel and no fallback).
[[noreturn]] void no_kernel_for(const char* op, Device device, DType dtype);
// Throws DeviceError when a plugin kernel returned a failure status.
void check_plugin_status(int32_t status, const char* op, Device device);
// Throws NotImplemented for an op a device lacks under Fallback::error.
[[noreturn]] void fallback_refused(const char* op, Device device, DType dtype);

template <class Args>
class KernelCall {
 public:
  using Kernel = void(const Args&);
  using Reference = void (*)(const Args&);

  KernelCall(const char* op, Device device, DType dtype, Args& args)
      : op_(op), device_(device), dtype_(dtype), args_(args) {}

  template <class P>
  KernelCall& in(const Tensor& t, P** field) {
    return bind(t, reinterpret_cast<void**>(const_cast<std::remove_const_t<P>**>(field)), Mode::in);
  }
  template <class P>
  KernelCall& out(const Tensor& t, P** field) {
    return bind(t, reinterpret_cast<void**>(field), Mode::out);
  }
  template <class P>
  KernelCall& inout(const Tensor& t, P** field) {
    return bind(t, reinterpret_cast<void**>(field), Mode::inout);
  }

  void run(Reference reference = nullptr) {
    KernelRegistry& reg = kernel_registry();
    if (auto* k = reg.find_exact<Kernel>(op_, device_.kind, dtype_)) return k(args_);
    if (device_.is_cpu()) {
      if (!reference) no_kernel_for(op_, device_, dtype_);
      return reference(args_);
    }
    if constexpr (PluginArgs<Args>::available) {
      using Fn = std::remove_pointer_t<unillm_kernel_fn>;
      if (auto* k = reg.find_exact<Fn>(op_, device_.kind, dtype_)) {
        auto c = PluginArgs<Args>::convert(args_);
        void* stream = backend_for(device_).stream(device_.index);
        return check_plugin_status(k(static_cast<unillm_stream>(stream), &c, sizeof c), op_, device_);
      }
    }
    run_on_host(reference);
  }

 private:
  enum class Mode { in, out, inout };
  struct Binding {
    const Tensor* t;
    void** field;
    Mode mode;
    ptrdiff_t offset;  // bytes from t's first element to where the field points (a sub-block)
  };
  static constexpr size_t kMaxBindings = 16;

  KernelCall& bind(const Tensor& t, void** field, Mode mode) {
    UNILLM_CHECK(n_ < kMaxBindings, "[", op_, "] too many bound tensors");
    const ptrdiff_t offset = t.defined() && *field ? static_cast<const char*>(*field) -
                                                         static_cast<const char*>(t.raw_data())
                                                   : 0;
    bindings_[n_++] = Binding{&t, field, mode, offset};
    // The binding is authoritative: a field left null points at the tensor (or stays null for an
    // undefined one, the kernels' "not needed").
    *field = t.defined() ? static_cast<char*>(t.raw_data()) + offset : nullptr;
    return *this;
  }

  void run_on_host(Reference reference) {
    KernelRegistry& reg = kernel_registry();
    if (reg.fallback() == KernelRegistry::Fallback::error) fallback_refused(op_, device_, dtype_);
    auto* k = reg.find_exact<Kernel>(op_, DeviceKind::cpu, dtype_);
    if (!k && !reference) no_kernel_for(op_, device_, dtype_);
    reg.report_fallback(op_, device_.kind);
    std::array<Tensor, kMaxBindings> host;
    for (size_t i = 0; i < n_; ++i) {
      const Binding& b = bindings_[i];
      if (!b.t->defined()) continue;
      UNILLM_CHECK(b.t->is_contiguous(), "[", op_, "] bound tensor ", i, " is not contiguous");
      host[i] = b.mode == Mode::out ? Tensor::empty(b.t->shape(), b.t->dtype()) : b.t->to(Device{});
      *b.field = static_cast<char*>(host[i].raw_data()) + b.offset;
    }
    if (k)
      k(args_);
    else
      reference(args_);
    for (size_t i = 0; i < n_; ++i)
      if (bindings_[i].mode != Mode::in && bindings_[i].t->defined())
        const_cast<Tensor*>(bindings_[i].t)->copy_from(host[i]);
  }

  const char* op_;
  Device device_;
  DType dtype_;
  Args& args_;
  std::array<Binding, kMaxBindings> bindings_{};
  size_t n_ = 0;
};

}  // namespace unillm::ops
