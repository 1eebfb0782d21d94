// The CPU's GEMM provider (docs/ARCHITECTURE.md, "CPU instruction sets"): every f32/f64 GEMM of
// the CPU kernels goes through here. The provider follows the chosen ISA level, not
// OPENBLAS_CORETYPE: at avx512 and above f32 runs on oneDNN's dnnl_sgemm (it picks AVX-512 kernels
// from CPUID; OpenBLAS 0.3.21 autodetects recent CPUs as Prescott), below it on OpenBLAS as
// before. f64 is always OpenBLAS (oneDNN has none). Row-major throughout.
#pragma once

#include <cstdint>
#include <string>

#include "backends/cpu/simd/isa.h"

namespace unillm::cpu {

enum class GemmProvider { openblas, onednn };

// Picks the provider for a level (register.cpp calls this whenever it (re-)registers kernels).
void choose_gemm_provider(IsaLevel level);
GemmProvider gemm_provider();
// "oneDNN (dnnl_sgemm …), its kernels up to avx512_core_amx" or "OpenBLAS …", for `unillm env`.
std::string gemm_provider_name();
// True when the build has oneDNN (then the avx512 levels use it).
bool onednn_built();

// c[m, n] = alpha · op(a) · op(b) + beta · c; op(x) = xᵀ when the flag is set. lda/ldb/ldc are
// the row strides of a, b and c as stored.
void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void dgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
           const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
           int64_t ldc);

// bf16 inputs, f32 accumulation and output (vdpbf16ps): c = op(a) · op(b) + beta · c, beta 0 or 1.
// Available from avx512_bf16 (vdpbf16ps; amx_bf16: AMX tiles) with oneDNN built
// (bf16_gemm_available); callers check first.
bool bf16_gemm_available();
void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const uint16_t* a,
               int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace unillm::cpu
