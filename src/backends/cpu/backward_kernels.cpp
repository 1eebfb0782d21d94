// Registers the CPU backward kernel families and the fused cross-entropy (one entry point, so the
// shared kernels.cpp list needs a single line).
#include "backends/cpu/backward_kernel_list.h"
#include "backends/cpu/kernel_list.h"

namespace unillm::cpu {

void register_backward() {
  register_linear_backward();
  register_rms_norm_backward();
  register_activation_backward();
  register_scatter_backward();
  register_cross_entropy();
}

}  // namespace unillm::cpu
