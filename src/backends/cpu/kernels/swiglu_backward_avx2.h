// Entry point of swiglu_backward_avx2.cpp; registered by swiglu_backward.cpp only when
// cpu::has_avx2() is true.
#pragma once

#include "ops/swiglu.h"

namespace unillm::cpu::avx2 {

// ops::SwigluBackwardKernel for f32.
void swiglu_backward_f32(const ops::SwigluBackwardArgs& a);

}  // namespace unillm::cpu::avx2
