// Entry points defined in the *_avx2.cpp files. Call them only when cpu::has_avx2() is true
// (registration chooses them at start-up).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "ops/attention.h"
#include "ops/elementwise.h"
#include "ops/linear.h"
#include "ops/rms_norm.h"
#include "ops/rope.h"
#include "ops/softmax.h"
#include "ops/swiglu.h"

namespace unillm::cpu::avx2 {

void to_f32(const void* src, DType t, float* dst, int64_t n);
void from_f32(const float* src, DType t, void* dst, int64_t n);
// y[m, n] for m <= 4 rows of f32 x and an f32/bf16/f16 W, reading W once (decode GEMV).
void gemv(const ops::LinearArgs& a);
void rms_norm_f32(const ops::RmsNormArgs& a);
void rope_f32(const ops::RopeArgs& a);
void swiglu_f32(const ops::SwigluArgs& a);
void softmax_f32(const ops::SoftmaxArgs& a);
void add_f32(const ops::BinaryArgs& a);
void mul_f32(const ops::BinaryArgs& a);
void attention_f32(const ops::AttentionArgs& a);

}  // namespace unillm::cpu::avx2
