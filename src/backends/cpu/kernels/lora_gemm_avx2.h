// Entry points of lora_gemm_avx2.cpp (the skinny f32 GEMMs of ops::lora_linear); lora_gemm.cpp's
// f32 kernel calls them only when cpu::has_avx2() is true.
#pragma once

#include <cstdint>

#include "ops/lora_linear.h"

namespace unillm::cpu {

// The largest m, n or k (the LoRA rank side, P·r for the x·Aᵀ product) the AVX2 kernel takes.
constexpr int64_t kLoraSmall = 64;

namespace avx2 {
// Whether lora_gemm_f32 takes these f32 args: min(m, n, k) <= kLoraSmall, and when B comes
// transposed min(n, k) <= kLoraSmall (it is repacked).
bool lora_gemm_f32_fits(const ops::LoraGemmArgs& g);
// ops::LoraGemmKernel for f32 over AVX2/FMA; no k split (bit-identical for any thread count).
void lora_gemm_f32(const ops::LoraGemmArgs& g);
}  // namespace avx2

}  // namespace unillm::cpu
