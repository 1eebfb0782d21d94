// The list of CPU kernel families; each family's file exposes register_<family>().
#include "backends/cpu/kernel_list.h"
#include "backends/cpu/simd.h"

namespace unillm::cpu {

void register_kernels() {
}

}  // namespace unillm::cpu
