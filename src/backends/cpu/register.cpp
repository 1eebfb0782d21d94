// Registers the CPU device and every CPU kernel (one line per op family).
#include "backends/cpu/register.h"

#include <cblas.h>

#include <memory>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/lora.h"
#include "backends/cpu/simd.h"
#include "core/parallel.h"

namespace unillm::cpu {

void register_cpu_backend() {
  static bool done = false;
  if (done) return;
  done = true;
  register_backend(std::make_unique<CpuBackend>());
  register_kernels();
  register_lora();
}

void set_num_threads(int n) {
  if (n <= 0) n = affinity_cores();
  set_omp_threads(n);
  openblas_set_num_threads(n);
}

const char* simd_level() { return has_avx2() ? "avx2+fma" : "portable"; }

std::string blas_info() {
  const char* threading = "unknown";
  switch (openblas_get_parallel()) {
    case 0: threading = "sequential"; break;
    case 1: threading = "pthreads"; break;
    case 2: threading = "openmp"; break;
  }
  return std::string("OpenBLAS ") + openblas_get_config() + " (threading: " + threading + ", core: " +
         openblas_get_corename() + ")";
}

}  // namespace unillm::cpu
