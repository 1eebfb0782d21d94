// The exact SVD (LAPACK's dgesdd through core/lapack) and randomized subspace iteration, both in
// f64 (see svd.h).
#include "nn/svd.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/lapack.h"
#include "core/rng.h"

namespace unillm::nn {
namespace {

using Mat = std::vector<double>;

// Transpose of a [m, n].
Mat transposed(const Mat& a, int64_t m, int64_t n) {
  Mat t(a.size());
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) t[j * m + i] = a[i * n + j];
  return t;
}

// c [m, n] = a [m, p] · b [p, n].
Mat matmul(const Mat& a, const Mat& b, int64_t m, int64_t p, int64_t n) {
  Mat c(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t q = 0; q < p; ++q) {
      const double v = a[i * p + q];
      if (v == 0) continue;
      for (int64_t j = 0; j < n; ++j) c[i * n + j] += v * b[q * n + j];
    }
  return c;
}

// Orthonormalises the k columns of q [m, k] in place (modified Gram-Schmidt, twice).
void orthonormalise(Mat& q, int64_t m, int64_t k) {
  for (int pass = 0; pass < 2; ++pass)
    for (int64_t j = 0; j < k; ++j) {
      for (int64_t i = 0; i < j; ++i) {
        double d = 0;
        for (int64_t e = 0; e < m; ++e) d += q[e * k + i] * q[e * k + j];
        for (int64_t e = 0; e < m; ++e) q[e * k + j] -= d * q[e * k + i];
      }
      double ss = 0;
      for (int64_t e = 0; e < m; ++e) ss += q[e * k + j] * q[e * k + j];
      const double inv = ss > 0 ? 1 / std::sqrt(ss) : 0.0;
      for (int64_t e = 0; e < m; ++e) q[e * k + j] *= inv;
    }
}

}  // namespace

Svd svd_top(const std::vector<double>& a, int64_t m, int64_t n, int64_t k) {
  UNILLM_CHECK(static_cast<int64_t>(a.size()) == m * n && k > 0 && k <= std::min(m, n),
               "[svd] rank ", k, " of a [", m, ", ", n, "] matrix");
  const int64_t p = std::min(m, n);
  Svd out;
  out.k = k;
  Mat u;  // [m, p]
  lapack::gesdd(m, n, a, u, out.s, out.vt);
  // Keep the k leading triplets: the first k rows of vt are contiguous, u's columns are strided.
  out.s.resize(static_cast<size_t>(k));
  out.vt.resize(static_cast<size_t>(k * n));
  if (k == p) {
    out.u = std::move(u);
    return out;
  }
  out.u.resize(static_cast<size_t>(m * k));
  for (int64_t i = 0; i < m; ++i) std::copy_n(u.begin() + i * p, k, out.u.begin() + i * k);
  return out;
}

Svd svd_subspace(const std::vector<double>& a, int64_t m, int64_t n, int64_t k, int64_t niter,
                 uint64_t seed) {
  UNILLM_CHECK(static_cast<int64_t>(a.size()) == m * n && k > 0 && k <= std::min(m, n) && niter >= 0,
               "[svd] subspace rank ", k, ", ", niter, " iterations, of a [", m, ", ", n, "] matrix");
  Rng rng(seed);
  Mat omega(static_cast<size_t>(n * k));
  for (auto& v : omega) v = rng.normal();
  const Mat at = transposed(a, m, n);  // [n, m]
  Mat q = matmul(a, omega, m, n, k);   // [m, k]
  orthonormalise(q, m, k);
  for (int64_t it = 0; it < niter; ++it) {
    Mat z = matmul(at, q, n, m, k);  // [n, k]
    orthonormalise(z, n, k);
    q = matmul(a, z, m, n, k);
    orthonormalise(q, m, k);
  }
  const Mat b = matmul(transposed(q, m, k), a, k, m, n);  // Qᵀ·A  [k, n]
  const Svd small = svd_top(b, k, n, k);                   // B = Ub·S·Vt
  Svd out;
  out.k = k;
  out.s = small.s;
  out.vt = small.vt;
  out.u = matmul(q, small.u, m, k, k);  // Q·Ub  [m, k]
  return out;
}

}  // namespace unillm::nn
