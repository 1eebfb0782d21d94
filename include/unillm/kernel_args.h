/* Argument structs of the kernels a unillm device plugin may provide (device_plugin.h). Each
 * starts with its size; every pointer is a device pointer; strides and offsets count elements.
 * An op that is not listed here runs on the CPU with copies in and out when a plugin device
 * lacks it (the host fallback); docs/devices.md lists what each op computes. */
#ifndef UNILLM_KERNEL_ARGS_H
#define UNILLM_KERNEL_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include "unillm/device_plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

#define UNILLM_MAX_DIMS 8

/* op "copy" (key: dst_dtype): dst[i] = convert(src[i]) over a strided view of up to 8 dims
 * (both sides the same shape; src and dst never overlap). Every Tensor copy, cast and
 * .contiguous() on a device is this op. */
typedef struct {
  size_t size;
  const void* src;
  void* dst;
  int32_t ndim;
  int64_t shape[UNILLM_MAX_DIMS];
  int64_t src_strides[UNILLM_MAX_DIMS];
  int64_t dst_strides[UNILLM_MAX_DIMS];
  unillm_dtype src_dtype, dst_dtype;
} unillm_copy_args;

/* op "accumulate" (key: dtype, f32 or f64): dst[i] += src[i] for n contiguous elements, in
 * index order per element (the gradient sums of the backward engine). */
typedef struct {
  size_t size;
  const void* src;
  void* dst;
  int64_t n;
  unillm_dtype dtype;
} unillm_accumulate_args;

#ifdef __cplusplus
}
#endif

#endif /* UNILLM_KERNEL_ARGS_H */
