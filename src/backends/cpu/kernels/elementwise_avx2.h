// Entry points of elementwise_avx2.cpp; registered by elementwise.cpp only when cpu::has_avx2()
// is true.
#pragma once

#include "ops/elementwise.h"

namespace unillm::cpu::avx2 {

// ops::BinaryKernel for f32: out = a + b, out = a · b.
void add_f32(const ops::BinaryArgs& a);
void mul_f32(const ops::BinaryArgs& a);

}  // namespace unillm::cpu::avx2
