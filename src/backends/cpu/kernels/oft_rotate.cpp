// CPU kernels of oft_rotate (ops/oft_rotate.h): the block-diagonal product x·blockdiag(R),
// parallel over rows, and the per-block gradient xᵀ·dy, parallel over blocks. Portable loops in
// the element type (accumulating in it, as the GEMM kernels do for f32).
#include <algorithm>

#include "backends/cpu/kernels/register_kernels.h"
#include "backends/cpu/simd/simd.h"
#include "core/parallel.h"
#include "core/registry.h"
#include "ops/oft_rotate.h"

namespace unillm::cpu {
namespace {

template <typename T>
void block_matmul(const ops::OftBlockMatmulArgs& a) {
  const auto* x = static_cast<const T*>(a.x);
  const auto* r = static_cast<const T*>(a.r);
  auto* y = static_cast<T*>(a.y);
  const int64_t b = a.b, blocks = a.k / b;
  parallel_for(a.m, std::max<int64_t>(1, 4096 / a.k), [&](int64_t lo, int64_t hi) {
    for (int64_t m = lo; m < hi; ++m)
      for (int64_t j = 0; j < blocks; ++j) {
        const T* xr = x + m * a.k + j * b;
        const T* rj = r + j * b * b;
        T* yr = y + m * a.k + j * b;
        std::fill(yr, yr + b, T(0));
        if (a.transpose) {  // y_c = Σ_k x_k R[c, k]
          for (int64_t c = 0; c < b; ++c) {
            T s = 0;
            for (int64_t k = 0; k < b; ++k) s += xr[k] * rj[c * b + k];
            yr[c] = s;
          }
        } else {  // y += x_k · R[k, :]
          for (int64_t k = 0; k < b; ++k) {
            const T xv = xr[k];
            for (int64_t c = 0; c < b; ++c) yr[c] += xv * rj[k * b + c];
          }
        }
      }
  });
}

template <typename T>
void block_grad(const ops::OftBlockGradArgs& a) {
  const auto* x = static_cast<const T*>(a.x);
  const auto* dy = static_cast<const T*>(a.dy);
  auto* g = static_cast<T*>(a.g);
  const int64_t b = a.b, blocks = a.k / b;
  parallel_for(blocks, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t j = lo; j < hi; ++j) {
      T* gj = g + j * b * b;
      std::fill(gj, gj + b * b, T(0));
      for (int64_t m = 0; m < a.m; ++m) {
        const T* xr = x + m * a.k + j * b;
        const T* dr = dy + m * a.k + j * b;
        for (int64_t k = 0; k < b; ++k) {
          const T xv = xr[k];
          for (int64_t c = 0; c < b; ++c) gj[k * b + c] += xv * dr[c];
        }
      }
    }
  });
}

}  // namespace

void register_oft_rotate() {
  auto& reg = kernel_registry();
  reg.add<ops::OftBlockMatmulKernel>("oft_block_matmul", DeviceKind::cpu, DType::f32, &block_matmul<float>, "",
                                     kPortable);
  reg.add<ops::OftBlockMatmulKernel>("oft_block_matmul", DeviceKind::cpu, DType::f64, &block_matmul<double>, "",
                                     kPortable);
  reg.add<ops::OftBlockGradKernel>("oft_block_grad", DeviceKind::cpu, DType::f32, &block_grad<float>, "",
                                   kPortable);
  reg.add<ops::OftBlockGradKernel>("oft_block_grad", DeviceKind::cpu, DType::f64, &block_grad<double>, "",
                                   kPortable);
}

}  // namespace unillm::cpu
