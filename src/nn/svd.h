// Deterministic truncated SVDs in f64 for PiSSA's initialisation (nn/linear.cpp) and the GaLore
// projectors (train/projector.cpp): a full one (LAPACK's dgesdd, as PEFT's init_lora_weights
// "pissa" = torch.linalg.svd on the CPU) and a fast one by subspace iteration from a fixed-seed
// Gaussian start (PEFT's "pissa_niter_<n>" = torch.svd_lowrank with q = k: Halko et al.'s
// randomized range finder).
#pragma once

#include <cstdint>
#include <vector>

namespace unillm::nn {

// A ≈ U·diag(S)·Vt with the k largest singular values, descending. Row-major.
struct Svd {
  int64_t k = 0;
  std::vector<double> u;   // [m, k], orthonormal columns
  std::vector<double> s;   // [k]
  std::vector<double> vt;  // [k, n], orthonormal rows
};

// Exact (to f64 rounding) top-k SVD of a [m, n]; k <= min(m, n). Signs are LAPACK's (callers
// that need a convention apply it, as train/projector.cpp does). Throws NumericError when a holds
// a NaN or inf.
Svd svd_top(const std::vector<double>& a, int64_t m, int64_t n, int64_t k);

// Randomized top-k SVD of a [m, n]: Q = orth(A·Ω), niter times Q = orth(A·orth(Aᵀ·Q)), then the
// exact SVD of Qᵀ·A. Ω ~ N(0, 1) from seed: the same seed gives the same result.
Svd svd_subspace(const std::vector<double>& a, int64_t m, int64_t n, int64_t k, int64_t niter,
                 uint64_t seed);

}  // namespace unillm::nn
