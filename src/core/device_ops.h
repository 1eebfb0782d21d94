// The device work core and autograd need below the ops layer: element copies (strided, with a
// dtype conversion; what Tensor::copy_from, contiguous() and to(dtype) run for device tensors)
// and gradient accumulation. Each is an op of the registry, "copy" keyed by the destination
// dtype and "accumulate" by the dtype; in-tree and plugin kernels take the same ABI structs
// (include/unillm/kernel_args.h). A device without the kernel goes through the host (reported
// once, or refused under KernelRegistry::Fallback::error).
#pragma once

#include "core/device.h"
#include "unillm/kernel_args.h"

namespace unillm {

using CopyKernel = void(const unillm_copy_args&);
using AccumulateKernel = void(const unillm_accumulate_args&);

// Runs a.src → a.dst on device (both sides there). The host loop for CPU tensors is
// copy_elements_host.
void device_copy(const unillm_copy_args& a, Device device);
// The same on host memory (the CPU's "copy" kernel and the fallback).
void copy_elements_host(const unillm_copy_args& a);
// a.dst += a.src on device (both there).
void device_accumulate(const unillm_accumulate_args& a, Device device);

}  // namespace unillm
