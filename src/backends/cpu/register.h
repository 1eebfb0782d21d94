// Entry point of the CPU backend: registers the device and all its kernels. Called once by the
// CLI (and by tests) at start-up; registration is explicit, never a static initialiser.
#pragma once

#include <string>

namespace unillm::cpu {

void register_cpu_backend();
// Sets the OpenMP and OpenBLAS thread counts together (one runtime; n <= 0: affinity cores).
void set_num_threads(int n);
// "avx2" or "portable": the kernel variant chosen for this CPU.
const char* simd_level();
// OpenBLAS's configuration string and threading model, for `unillm env`.
std::string blas_info();

}  // namespace unillm::cpu
