// Entry point of paged_attention_avx512.cpp; registered by paged_attention.cpp only at the avx512
// level and above.
#pragma once

#include "ops/attention.h"

namespace unillm::cpu::avx512 {

// ops::AttentionKernel ("paged_attention") for f32.
void attention_f32(const ops::AttentionArgs& a);

}  // namespace unillm::cpu::avx512
