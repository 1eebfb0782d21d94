// Entry points of causal_attention_avx512.cpp; registered by causal_attention.cpp only at the
// avx512 level and above.
#pragma once

#include "ops/causal_attention.h"

namespace unillm::cpu::avx512 {

// ops::CausalAttentionKernel and ops::CausalAttentionBackwardKernel for f32.
void causal_attention_f32(const ops::CausalAttentionArgs& a);
void causal_attention_backward_f32(const ops::CausalAttentionBackwardArgs& a);

}  // namespace unillm::cpu::avx512
