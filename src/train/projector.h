// The low-rank gradient projection of GaLore and APOLLO for one HF-named [rows, cols] matrix:
// which side is projected, the bases (the top singular vectors of the gradient, or a seeded
// Gaussian matrix), and the products that move a gradient into the rank-r space and back.
// Host f32 arrays, row-major; products accumulate in double.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace unillm::train {

// left:  low = Pᵀ·G  [r, cols], P = left basis  [rows, r];  back: P·low
// right: low = G·Qᵀ  [rows, r], Q = right basis [r, cols];  back: low·Q
// full:  low = Pᵀ·G·Qᵀ [r, r];                               back: P·low·Q
enum class ProjSide { kLeft, kRight, kFull };

struct ProjShape {
  int64_t rows = 0, cols = 0, r = 0;
  ProjSide side = ProjSide::kRight;
  int64_t left_size() const { return side == ProjSide::kRight ? 0 : rows * r; }
  int64_t right_size() const { return side == ProjSide::kLeft ? 0 : r * cols; }
  int64_t low_rows() const { return side == ProjSide::kRight ? rows : r; }
  int64_t low_cols() const { return side == ProjSide::kLeft ? cols : r; }
  int64_t low_size() const { return low_rows() * low_cols(); }
};

// galore_torch's GaLoreProjector: std projects the smaller side (right when rows >= cols),
// reverse_std the larger, right/left/full as named. An SVD basis has rank min(rank, rows, cols)
// (torch's U[:, :rank] keeps what exists); a random one (APOLLO) has rank `rank`.
ProjShape projection_shape(const std::string& proj_type, int64_t rows, int64_t cols, int64_t rank,
                           bool svd);

// The bases from torch.linalg.svd(G) as GaLore takes them (left: U[:, :r], right: Vh[:r], full:
// both), computed in f64 (one-sided Jacobi, nn/svd.h). Singular vectors' signs are arbitrary; here
// each basis vector is flipped so that its entry of largest magnitude (the first such) is
// positive, which makes the result reproducible (the reference check applies the same rule).
void svd_basis(const float* g, const ProjShape& s, float* left, float* right);

// apollo_torch's random basis: torch.randn of the projected side's shape ([rows, r] left,
// [r, cols] right) from torch.Generator().manual_seed(seed), divided by sqrt(r). torch's CPU
// generator is reproduced (mt19937 on the seed's low 32 bits; randn's Box–Muller over blocks of 16
// uniforms, or its cached double pairs below 16 values), so the basis is the package's own up to
// the last bits of torch's vectorised log/sin/cos.
void random_basis(const ProjShape& s, uint64_t seed, float* left, float* right);
// The seed after a refresh (apollo_torch's next_seed: the 15th value of torch.randint(0, 2^63 − 1,
// (15,)) from a generator seeded with `seed`).
uint64_t next_projection_seed(uint64_t seed);
// torch.randn(n, generator=torch.Generator().manual_seed(seed)) as f32 (exposed for tests).
std::vector<float> torch_randn(uint64_t seed, int64_t n);

// low [low_rows, low_cols] = projection of g [rows, cols].
void project(const float* g, const ProjShape& s, const float* left, const float* right, float* low);
// out [rows, cols] = the projection of low back, times scale.
void project_back(const float* low, const ProjShape& s, const float* left, const float* right,
                  float scale, float* out);

}  // namespace unillm::train
