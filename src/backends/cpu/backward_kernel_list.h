// Register functions of the CPU backward kernel families (called by register_backward()).
#pragma once

namespace unillm::cpu {

void register_linear_backward();
void register_rms_norm_backward();
void register_activation_backward();  // swiglu_backward, softmax_backward
void register_scatter_backward();  // scatter_add_rows (embedding, gather_rows)
void register_cross_entropy();  // linear_cross_entropy forward and backward

}  // namespace unillm::cpu
