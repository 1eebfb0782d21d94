// Entry point of paged_attention_avx2.cpp; registered by paged_attention.cpp only when
// cpu::has_avx2() is true.
#pragma once

#include "ops/attention.h"

namespace unillm::cpu::avx2 {

// ops::AttentionKernel ("paged_attention") for f32.
void attention_f32(const ops::AttentionArgs& a);

}  // namespace unillm::cpu::avx2
