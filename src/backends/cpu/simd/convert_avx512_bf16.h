// Entry point of convert_avx512_bf16.cpp: f32 → bf16 with AVX512-BF16's vcvtne2ps2bf16 (round to
// nearest even, as convert.h's portable and AVX2 paths), for the bf16 GEMM operands
// (gemm/bf16_compute.h), which convert every activation and gradient they multiply.
#pragma once

#include <cstdint>

namespace unillm::cpu::avx512_bf16 {

void f32_to_bf16(const float* src, uint16_t* dst, int64_t n);

}  // namespace unillm::cpu::avx512_bf16
