// Declarations of each CPU kernel family's register function.
#pragma once

namespace unillm::cpu {

void register_linear();
void register_embedding();
void register_rms_norm();
void register_rope();
void register_activation();  // swiglu, softmax
void register_elementwise();  // add, mul
void register_attention();
void register_backward();  // *_backward kernels and linear_cross_entropy (backward_kernels.cpp)
void register_causal_attention();
void register_optimizer();  // adamw, sum_squares, scale
void register_cast();  // f32 <-> bf16/f16 (convert.cpp)  // training attention, forward + backward

}  // namespace unillm::cpu
