// Checks shared by every op (which kernel runs is decided by ops/kernel_call.h).
#pragma once

#include <string>

#include "core/registry.h"
#include "core/tensor.h"

namespace unillm::ops {

// Shape/dtype checks shared by ops; messages start with "[op] ".
void check_dtype(const char* op, const char* arg, const Tensor& t, DType expected);
void check_ndim(const char* op, const char* arg, const Tensor& t, int ndim);
void check_same_device(const char* op, const Tensor& a, const Tensor& b);
// Throws DTypeError unless t is f32 or f64 (the activation dtypes).
void check_f32_or_f64(const char* op, const char* arg, const Tensor& t);
// Throws ShapeError when t is undefined.
void check_defined(const char* op, const char* arg, const Tensor& t);

// The dtype of a parameter's gradient: f64 for f64 parameters, else f32 (the master gradient of
// f32/bf16/f16 weights).
inline DType master_grad_dtype(DType param_dtype) {
  return param_dtype == DType::f64 ? DType::f64 : DType::f32;
}

// Scalar element access for the reference implementations (any floating dtype, via double).
using unillm::load_scalar;  // element access for the reference implementations (core/dtype.h)
using unillm::store_scalar;

}  // namespace unillm::ops
