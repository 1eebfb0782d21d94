// Entry point of rope_avx2.cpp; registered by rope.cpp only when cpu::has_avx2() is true.
#pragma once

#include "ops/rope.h"
#include "ops/rope_qkv.h"

namespace unillm::cpu::avx2 {

// ops::RopeKernel for f32.
void rope_f32(const ops::RopeArgs& a);
// ops::RopeQkvKernel: rope_f32's rotation of the q and k heads of a fused projection row (one
// cos/sin table per token for both), v copied.
void rope_qkv_f32(const ops::RopeQkvArgs& a);

}  // namespace unillm::cpu::avx2
