// Entry point of the CPU backend: registers the device and all its kernels. Called once by the
// CLI (and by tests) at start-up; registration is explicit, never a static initialiser.
#pragma once

#include <string>

#include "backends/cpu/simd/isa.h"

namespace unillm::cpu {

// Registers the CPU device and its kernels for the level min(cap, what the CPU has). Once per
// process: later calls do nothing (the CLI calls it with --isa before anything else does).
void register_cpu_backend(IsaLevel cap = IsaLevel::avx512_bf16);
// Re-registers every CPU kernel for min(cap, detected) and returns that level: for tests that
// run the same kernels under each level the machine has.
IsaLevel reregister_cpu_kernels(IsaLevel cap);
// Sets the OpenMP and OpenBLAS thread counts together (one runtime; n <= 0: affinity cores).
void set_num_threads(int n);
// "avx2 (detected avx512_bf16: avx2 fma …; …)": the chosen level, what the CPU has, and the
// kernel variants this build has.
std::string isa_info();
// OpenBLAS's configuration string and threading model, for `unillm env`.
std::string blas_info();
// The f32/bf16 GEMM provider at the chosen level (gemm/provider.h).
std::string gemm_info();

}  // namespace unillm::cpu
