// The optimizer's element loops as ops, so they run where the parameters live: the fused AdamW
// update, the per-chunk sums of squares of the global gradient norm (fixed chunks, summed on the
// host in chunk order: the same norm for every thread count and device), and in-place scaling
// (clipping). All f32 over contiguous [n] slices of the flat arenas.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace unillm::ops {

// torch.optim.AdamW's step for one slice: p = p·decay − step_size · m / (sqrt(v) / sqrt_bc2 + eps)
// with m, v updated first (m = b1·m + (1 − b1)·g, v = b2·v + (1 − b2)·g²).
struct AdamWScalars {
  float decay = 1, beta1 = 0.9f, beta2 = 0.999f, step_size = 0, sqrt_bc2 = 1, eps = 1e-8f;
};
struct AdamWArgs {
  float* p;
  const float* g;
  float* m;
  float* v;
  int64_t n;
  AdamWScalars s;
};
using AdamWKernel = void(const AdamWArgs&);
void adamw_update(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                  const AdamWScalars& s);
void adamw_reference(const AdamWArgs& a);

// partials[c] = Σ x[i]² (in double) over chunk c = [c·chunk, (c + 1)·chunk) of x.
constexpr int64_t kSumSquaresChunk = int64_t{1} << 16;
struct SumSquaresArgs {
  const float* x;
  double* partials;
  int64_t n, chunk;
};
using SumSquaresKernel = void(const SumSquaresArgs&);
// Σ x² of an f32 tensor in double: chunk partials on x's device, added on the host in order.
double sum_squares(const Tensor& x);
void sum_squares_reference(const SumSquaresArgs& a);

struct ScaleArgs {
  float* x;
  int64_t n;
  float factor;
};
using ScaleKernel = void(const ScaleArgs&);
void scale_(const Tensor& x, float factor);  // x *= factor in place (f32, contiguous)
void scale_reference(const ScaleArgs& a);

}  // namespace unillm::ops
