// The list of CPU kernel families; each family's file exposes register_<family>().
#include "backends/cpu/kernel_list.h"
#include "backends/cpu/simd.h"

namespace unillm::cpu {

void register_kernels() {
  register_linear();
  register_embedding();
  register_rms_norm();
  register_rope();
  register_activation();
  register_elementwise();
  register_attention();
  register_backward();
  register_causal_attention();
  register_cast();
  register_optimizer();
}

}  // namespace unillm::cpu
