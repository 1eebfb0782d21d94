// CPU linear backward: dx = dy·W and dW = dyᵀ·x through the GEMM provider (bf16 operands under
// bf16 compute) (bf16/f16 W converted panel by
// panel; dW is the f32 master gradient), db = column sums of dy accumulated in double, parallel
// over columns (each column summed in row order: deterministic).
#include <algorithm>
#include <type_traits>
#include <vector>

#include "backends/cpu/gemm/bf16_compute.h"
#include "backends/cpu/gemm/gemm_backward.h"
#include "backends/cpu/gemm/provider.h"
#include "backends/cpu/kernels/register_kernels.h"
#include "backends/cpu/simd/simd.h"
#include "core/parallel.h"
#include "core/registry.h"
#include "ops/linear.h"

namespace unillm::cpu {
namespace {

template <typename T>
void column_sums(const T* dy, T* db, int64_t m, int64_t n) {
  parallel_for(n, 256, [&](int64_t lo, int64_t hi) {
    std::vector<double> acc(static_cast<size_t>(hi - lo), 0.0);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = lo; j < hi; ++j) acc[j - lo] += dy[i * n + j];
    for (int64_t j = lo; j < hi; ++j) db[j] = static_cast<T>(acc[j - lo]);
  });
}

// bf16 compute (gemm/bf16_compute.h): dy is rounded once for both products.
void linear_backward_bf16(const ops::LinearBackwardArgs& a) {
  ScratchBuffer<uint16_t> dy16, w16, x16;
  const uint16_t* dy = as_bf16(a.dy, DType::f32, a.m, a.n, dy16);
  if (a.dx)
    gemm_bf16(false, false, a.m, a.k, a.n, dy, a.n, as_bf16(a.w, a.w_dtype, a.n, a.k, w16), a.k, 0.0f,
              static_cast<float*>(a.dx), a.k);
  if (a.dw)
    gemm_bf16(true, false, a.n, a.k, a.m, dy, a.n, as_bf16(a.x, DType::f32, a.m, a.k, x16), a.k, 0.0f,
              static_cast<float*>(a.dw), a.k);
  if (a.db) column_sums(static_cast<const float*>(a.dy), static_cast<float*>(a.db), a.m, a.n);
}

template <typename T>
void linear_backward(const ops::LinearBackwardArgs& a) {
  if constexpr (std::is_same_v<T, float>)
    if (bf16_compute_for(a.w_dtype)) return linear_backward_bf16(a);
  const auto* dy = static_cast<const T*>(a.dy);
  if (a.dx) gemm_a_w(dy, a.n, a.w, a.w_dtype, static_cast<T*>(a.dx), a.m, a.n, a.k);
  if (a.dw)
    gemm_at_b(dy, static_cast<const T*>(a.x), static_cast<T*>(a.dw), a.m, a.n, a.k, false);
  if (a.db) column_sums(dy, static_cast<T*>(a.db), a.m, a.n);
}

}  // namespace

void register_linear_backward() {
  auto& reg = kernel_registry();
  for (DType w : {DType::f32, DType::bf16, DType::f16})
    reg.add<ops::LinearBackwardKernel>("linear_backward", DeviceKind::cpu, w,
                                       &linear_backward<float>, "", avx2_or_portable());
  reg.add<ops::LinearBackwardKernel>("linear_backward", DeviceKind::cpu, DType::f64,
                                     &linear_backward<double>, "", kPortable);
}

}  // namespace unillm::cpu
