// CPU linear backward: dx = dy·W and dW = dyᵀ·x through OpenBLAS (bf16/f16 W converted panel by
// panel; dW is the f32 master gradient), db = column sums of dy accumulated in double, parallel
// over columns (each column summed in row order: deterministic).
#include <algorithm>
#include <vector>

#include "backends/cpu/gemm/gemm_backward.h"
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

template <typename T>
void linear_backward(const ops::LinearBackwardArgs& a) {
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
