// Registers the CPU device and every CPU kernel (one line per op, kernels/register_kernels.h).
#include "backends/cpu/register.h"

#include <cblas.h>

#include <memory>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/gemm/provider.h"
#include "backends/cpu/kernels/register_kernels.h"
#include "backends/cpu/simd/simd.h"
#include "core/parallel.h"

namespace unillm::cpu {

namespace {

void register_kernels() {
  register_linear();
  register_linear_q();
  register_linear_4bit();
  register_embedding();
  register_rms_norm();
  register_rope();
  register_swiglu();
  register_softmax();
  register_elementwise();
  register_paged_attention();
  register_linear_backward();
  register_rms_norm_backward();
  register_swiglu_backward();
  register_softmax_backward();
  register_scatter_add_rows();
  register_linear_cross_entropy();
  register_causal_attention();
  register_cast();
  register_optimizer();
  register_lora_gemm();
  register_oft_rotate();
}

}  // namespace

void register_cpu_backend(IsaLevel cap) {
  static bool done = false;
  if (done) return;
  done = true;
  register_backend(std::make_unique<CpuBackend>());
  choose_gemm_provider(choose_isa(cap));
  register_kernels();
}

IsaLevel reregister_cpu_kernels(IsaLevel cap) {
  register_cpu_backend(cap);
  const IsaLevel level = choose_isa(cap);
  choose_gemm_provider(level);
  register_kernels();  // insert_or_assign: every entry now points at this level's kernel
  return level;
}

void set_num_threads(int n) {
  if (n <= 0) n = affinity_cores();
  set_omp_threads(n);
  openblas_set_num_threads(n);
}

std::string isa_info() {
  // The variants that exist so far: a level above them runs the highest one below it.
  return std::string(isa_name(chosen_isa())) + " (detected " + isa_name(detected_isa()) + ": " +
         feature_names(cpu_features()) + "; kernel variants built: portable, avx2, avx512; `env --kernels` lists each kernel's)";
}

std::string gemm_info() { return gemm_provider_name(); }

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
