// oft_rotate: OFT's input rotation (PEFT 0.17's OFTRotationModule), y = x · blockdiag(R_0, …, R_{n−1})
// with one b×b orthogonal-ish block per b input features:
//   y[.., j·b + c] = Σ_k x[.., j·b + k] · R_j[k, c]
// R_j comes from the skew-symmetric Q_j = M_j − M_jᵀ, M_j holding row j of the parameter at the
// strict upper triangle in row-major order (torch.triu_indices(b, b, 1)):
//   Cayley–Neumann (use_cayley_neumann, the default): R = I + 2·(Q + Q² + … + Q^{t−1}), t terms
//   (t ≤ 1: R = I; PEFT's _cayley_batch), exact Cayley: R = (I − Q)(I + Q)⁻¹.
// Shapes: x [.., K] f32/f64; weight [rows, b(b−1)/2] in x's dtype; blocks = K / b rows starting
// at first_row are used (a fused layer keeps each part's rows in one tensor). The rotation is
// built on the host in f64 each call (n·b³ flops: small next to the layer's GEMM).
// Backward (fresh tensors, overwritten): dx[.., block j] = dy_j · R_jᵀ; G_j = x_jᵀ·dy_j summed
// over rows, then d weight through R(Q) (rows outside [first_row, first_row + blocks) are zero).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace unillm::ops {

struct OftRotation {
  Tensor weight;  // [rows, b(b−1)/2]
  int64_t first_row = 0;
  int64_t block_size = 0;  // b; K must be a multiple of it
  bool neumann = true;     // Cayley–Neumann series, else the exact Cayley transform
  int64_t terms = 5;       // num_cayley_neumann_terms
};

Tensor oft_rotate(const Tensor& x, const OftRotation& r);

// The rotation blocks of `blocks` skew vectors (row-major [blocks, b(b−1)/2]) as [blocks, b, b]
// row-major f64; the same formulas as oft_rotate (merge and the tests use them).
std::vector<double> oft_rotation_blocks(const double* skew, int64_t blocks, int64_t b, bool neumann,
                                        int64_t terms);
// d skew [blocks, b(b−1)/2] (overwritten) from G = dL/dR [blocks, b, b].
void oft_rotation_backward(const double* skew, const double* g, int64_t blocks, int64_t b,
                           bool neumann, int64_t terms, double* d_skew);

// The block-diagonal product of the kernel: y[m, j·b + c] = Σ_k x[m, j·b + k] · R[j, k, c]
// (transpose: R[j, c, k], for dx). Row-major, f32 or f64 throughout, y overwritten.
struct OftBlockMatmulArgs {
  const void* x;  // [m, k]
  const void* r;  // [k / b, b, b]
  void* y;        // [m, k]
  int64_t m, k, b;
  bool transpose;
  DType dtype;
};
using OftBlockMatmulKernel = void(const OftBlockMatmulArgs&);
// G[j, k, c] = Σ_m x[m, j·b + k] · dy[m, j·b + c] (overwritten).
struct OftBlockGradArgs {
  const void* x;   // [m, k]
  const void* dy;  // [m, k]
  void* g;         // [k / b, b, b]
  int64_t m, k, b;
  DType dtype;
};
using OftBlockGradKernel = void(const OftBlockGradArgs&);
void oft_block_matmul_reference(const OftBlockMatmulArgs& a);
void oft_block_grad_reference(const OftBlockGradArgs& a);

}  // namespace unillm::ops
