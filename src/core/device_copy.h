// Element copies on a device (strided, with a dtype conversion): what Tensor::copy_from,
// contiguous() and to(dtype) run for device tensors. The kernel is op "copy" keyed by the
// destination dtype (in-tree kernels and plugin kernels take the same ABI struct,
// unillm_copy_args); a device without it copies through the host (reported once, or refused
// under KernelRegistry::Fallback::error).
#pragma once

#include "core/device.h"
#include "unillm/kernel_args.h"

namespace unillm {

using CopyKernel = void(const unillm_copy_args&);

// Runs a.src → a.dst on device (both sides there). The host loop for CPU tensors is
// copy_elements_host.
void device_copy(const unillm_copy_args& a, Device device);
// The same on host memory (the CPU's "copy" kernel and the fallback).
void copy_elements_host(const unillm_copy_args& a);

}  // namespace unillm
