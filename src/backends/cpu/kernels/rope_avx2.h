// Entry point of rope_avx2.cpp; registered by rope.cpp only when cpu::has_avx2() is true.
#pragma once

#include "ops/rope.h"

namespace unillm::cpu::avx2 {

// ops::RopeKernel for f32.
void rope_f32(const ops::RopeArgs& a);

}  // namespace unillm::cpu::avx2
