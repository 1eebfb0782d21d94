// CPU "lora_gemm": the strided row-major GEMMs of ops::lora_linear (column slices of the fused
// output need no copies). f32 shapes with a side of at most kLoraSmall (the rank) go to the AVX2
// kernel (lora_gemm_avx2.cpp) when the CPU has it; the rest over the GEMM provider (gemm/provider.h):
// the larger of m and n is split statically across our threads, each block one sgemm, which both
// providers run on the calling thread inside our parallel region (their own threading costs more
// than the work here). No k split on either path: results do not depend
// on the thread count.
#include "backends/cpu/gemm/gemm_backward.h"
#include "backends/cpu/gemm/provider.h"
#include "backends/cpu/kernels/lora_gemm_avx2.h"
#include "backends/cpu/kernels/register_kernels.h"
#include "backends/cpu/simd/simd.h"
#include "core/registry.h"
#include "ops/lora_linear.h"

namespace unillm::cpu {
namespace {

void gemm_block(const ops::LoraGemmArgs& g, const float*, int64_t m, int64_t n, const float* a,
                const float* b, float* c) {
  sgemm(g.trans_a, g.trans_b, m, n, g.k, static_cast<float>(g.alpha), a, g.lda, b, g.ldb,
        static_cast<float>(g.beta), c, g.ldc);
}

void gemm_block(const ops::LoraGemmArgs& g, const double*, int64_t m, int64_t n, const double* a,
                const double* b, double* c) {
  dgemm(g.trans_a, g.trans_b, m, n, g.k, g.alpha, a, g.lda, b, g.ldb, g.beta, c, g.ldc);
}

template <typename T>
void lora_gemm(const ops::LoraGemmArgs& g) {
  const auto* a = static_cast<const T*>(g.a);
  const auto* b = static_cast<const T*>(g.b);
  auto* c = static_cast<T*>(g.c);
  const bool split_m = g.m >= g.n;
  const int64_t len = split_m ? g.m : g.n;
  const int64_t parts = parts_for(len, 64);
  for_parts(len, parts, [&](int64_t, int64_t lo, int64_t hi) {
    if (split_m)  // rows lo..hi of C: rows of A (columns when A is transposed)
      gemm_block(g, a, hi - lo, g.n, a + (g.trans_a ? lo : lo * g.lda), b, c + lo * g.ldc);
    else  // columns lo..hi of C: columns of B (rows when B is transposed)
      gemm_block(g, a, g.m, hi - lo, a, b + (g.trans_b ? lo * g.ldb : lo), c + lo);
  });
}

void lora_gemm_f32(const ops::LoraGemmArgs& g) {
  if (avx2::lora_gemm_f32_fits(g))
    avx2::lora_gemm_f32(g);
  else
    lora_gemm<float>(g);
}

}  // namespace

void register_lora_gemm() {
  auto& reg = kernel_registry();
  reg.add<ops::LoraGemmKernel>("lora_gemm", DeviceKind::cpu, DType::f32,
                               has_avx2() ? &lora_gemm_f32 : &lora_gemm<float>, "",
                               avx2_or_portable());
  reg.add<ops::LoraGemmKernel>("lora_gemm", DeviceKind::cpu, DType::f64, &lora_gemm<double>, "",
                               kPortable);
}

}  // namespace unillm::cpu
