// Entry points of causal_attention_avx2.cpp; registered by causal_attention.cpp only when
// cpu::has_avx2() is true.
#pragma once

#include "ops/causal_attention.h"

namespace unillm::cpu::avx2 {

// ops::CausalAttentionKernel and ops::CausalAttentionBackwardKernel for f32.
void causal_attention_f32(const ops::CausalAttentionArgs& a);
void causal_attention_backward_f32(const ops::CausalAttentionBackwardArgs& a);

}  // namespace unillm::cpu::avx2
