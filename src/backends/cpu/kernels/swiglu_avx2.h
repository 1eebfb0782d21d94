// Entry point of swiglu_avx2.cpp; registered by swiglu.cpp only when cpu::has_avx2() is true.
#pragma once

#include "ops/swiglu.h"

namespace unillm::cpu::avx2 {

// ops::SwigluKernel for f32.
void swiglu_f32(const ops::SwigluArgs& a);

}  // namespace unillm::cpu::avx2
