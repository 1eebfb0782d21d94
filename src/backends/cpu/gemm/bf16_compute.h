// bf16 compute for the CPU's f32 GEMMs (ops/matmul_compute.h): when the caller asked for bf16 and
// the chosen ISA level has the bf16 GEMM (gemm/provider.h: AVX512-BF16 through oneDNN), the
// linear, linear-backward and lm_head GEMMs round both inputs to bf16 (nearest even) and
// accumulate in f32; their outputs stay f32. Otherwise they compute in f32 as before.
#pragma once

#include <cstdint>

#include "backends/cpu/scratch.h"
#include "core/dtype.h"

namespace unillm::cpu {

// True when GEMMs whose weight is `wt` (f32 or bf16; f16 never) run in bf16 now.
bool bf16_compute_for(DType wt);

// dst[r · cols + j] = bf16(src[r · ld + j]), rows converted in parallel.
void rows_to_bf16(const float* src, int64_t rows, int64_t cols, int64_t ld, uint16_t* dst);

// A contiguous [rows, cols] operand in f32 or bf16 as bf16: bf16 data is used as it is, f32 is
// converted into buf (resized here).
const uint16_t* as_bf16(const void* src, DType t, int64_t rows, int64_t cols,
                        ScratchBuffer<uint16_t>& buf);

}  // namespace unillm::cpu
