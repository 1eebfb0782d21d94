// Entry point of rms_norm_avx2.cpp; registered by rms_norm.cpp only when cpu::has_avx2() is true.
#pragma once

#include "ops/add_rms_norm.h"
#include "ops/rms_norm.h"

namespace unillm::cpu::avx2 {

// ops::RmsNormKernel for f32 x and an f32/bf16/f16 weight.
void rms_norm_f32(const ops::RmsNormArgs& a);
// ops::AddRmsNormKernel: the residual add, then rms_norm_f32's arithmetic on the sum.
void add_rms_norm_f32(const ops::AddRmsNormArgs& a);

}  // namespace unillm::cpu::avx2
