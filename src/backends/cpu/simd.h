// Runtime CPU feature detection and the kernel-registration hook list.
#pragma once

namespace unillm::cpu {

bool has_avx2();  // AVX2 + FMA + F16C
// Registers every CPU kernel into the ops registry (defined in kernels.cpp).
void register_kernels();

}  // namespace unillm::cpu
