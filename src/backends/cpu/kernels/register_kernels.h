// The register function of each CPU kernel file (kernels/<op>.cpp defines register_<op>()); the
// list in register.cpp calls each once at start-up, when the CPU backend is registered.
#pragma once

namespace unillm::cpu {

void register_linear();
void register_linear_q();  // weight-only int8 / int4 (ops/quant.h)
void register_linear_4bit();  // bitsandbytes nf4 / fp4, QLoRA (ops/quant_4bit.h)
void register_linear_backward();
void register_lora_gemm();
void register_oft_rotate();  // oft_block_matmul, oft_block_grad (ops/oft_rotate.h)
void register_embedding();
void register_scatter_add_rows();  // embedding and gather_rows backward
void register_elementwise();       // add, mul
void register_cast();              // f32 <-> bf16/f16
void register_rms_norm();
void register_rms_norm_backward();
void register_rope();
void register_swiglu();
void register_swiglu_backward();
void register_softmax();
void register_softmax_backward();
void register_paged_attention();
void register_causal_attention();      // causal_attention and causal_attention_backward
void register_linear_cross_entropy();  // linear_cross_entropy, _backward and _fused
void register_optimizer();             // adamw, sum_squares, scale

}  // namespace unillm::cpu
