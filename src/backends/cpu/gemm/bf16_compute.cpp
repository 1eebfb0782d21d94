#include "backends/cpu/gemm/bf16_compute.h"

#include "backends/cpu/gemm/provider.h"
#include "backends/cpu/simd/convert.h"
#include "core/error.h"
#include "core/parallel.h"
#include "ops/matmul_compute.h"

namespace unillm::cpu {

bool bf16_compute_for(DType wt) {
  return (wt == DType::f32 || wt == DType::bf16) &&
         ops::matmul_compute() == ops::MatmulCompute::bf16 && bf16_gemm_available();
}

void rows_to_bf16(const float* src, int64_t rows, int64_t cols, int64_t ld, uint16_t* dst) {
  if (ld == cols) {
    // One contiguous block: split it evenly whatever the row count (a 1-row call is common).
    const int64_t n = rows * cols;
    parallel_for(n, 1 << 14, [&](int64_t lo, int64_t hi) {
      from_f32(src + lo, DType::bf16, dst + lo, hi - lo);
    });
    return;
  }
  parallel_for(rows, 8, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) from_f32(src + r * ld, DType::bf16, dst + r * cols, cols);
  });
}

const uint16_t* as_bf16(const void* src, DType t, int64_t rows, int64_t cols,
                        ScratchBuffer<uint16_t>& buf) {
  if (t == DType::bf16) return static_cast<const uint16_t*>(src);
  UNILLM_CHECK(t == DType::f32, "[cpu] bf16 GEMM operand must be f32 or bf16, got ", dtype_name(t));
  buf.resize(rows * cols);
  rows_to_bf16(static_cast<const float*>(src), rows, cols, cols, buf.data());
  return buf.data();
}

}  // namespace unillm::cpu
