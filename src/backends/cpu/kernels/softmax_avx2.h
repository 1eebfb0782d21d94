// Entry point of softmax_avx2.cpp; registered by softmax.cpp only when cpu::has_avx2() is true.
#pragma once

#include "ops/softmax.h"

namespace unillm::cpu::avx2 {

// ops::SoftmaxKernel for f32.
void softmax_f32(const ops::SoftmaxArgs& a);

}  // namespace unillm::cpu::avx2
