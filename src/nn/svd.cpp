// One-sided Jacobi SVD (Hestenes) and randomized subspace iteration, both in f64 (see svd.h).
#include "nn/svd.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
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

// Jacobi on the rows of x [n, m] (the columns of the matrix being decomposed, n <= m): rotates
// pairs of rows until all are orthogonal, applying the same rotations to v [n, n] (rows = the
// right singular vectors). Afterwards row i of x = σ_i · u_iᵀ.
void jacobi_rows(Mat& x, Mat& v, int64_t n, int64_t m) {
  for (int sweep = 0; sweep < 60; ++sweep) {
    bool rotated = false;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = i + 1; j < n; ++j) {
        double* xi = &x[i * m];
        double* xj = &x[j * m];
        double alpha = 0, beta = 0, gamma = 0;
        for (int64_t e = 0; e < m; ++e) {
          alpha += xi[e] * xi[e];
          beta += xj[e] * xj[e];
          gamma += xi[e] * xj[e];
        }
        if (std::fabs(gamma) <= 1e-15 * std::sqrt(alpha * beta) || gamma == 0) continue;
        rotated = true;
        const double zeta = (beta - alpha) / (2 * gamma);
        const double t = (zeta >= 0 ? 1.0 : -1.0) / (std::fabs(zeta) + std::sqrt(1 + zeta * zeta));
        const double c = 1 / std::sqrt(1 + t * t), s = c * t;
        for (int64_t e = 0; e < m; ++e) {
          const double a = xi[e], b = xj[e];
          xi[e] = c * a - s * b;
          xj[e] = s * a + c * b;
        }
        double* vi = &v[i * n];
        double* vj = &v[j * n];
        for (int64_t e = 0; e < n; ++e) {
          const double a = vi[e], b = vj[e];
          vi[e] = c * a - s * b;
          vj[e] = s * a + c * b;
        }
      }
    if (!rotated) return;
  }
}

// Top-k SVD of a [m, n] with n <= m.
Svd svd_tall(const Mat& a, int64_t m, int64_t n, int64_t k) {
  Mat x = transposed(a, m, n);  // [n, m]: row i = column i of a
  Mat v(static_cast<size_t>(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i) v[i * n + i] = 1;
  jacobi_rows(x, v, n, m);
  std::vector<double> norm(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    double ss = 0;
    for (int64_t e = 0; e < m; ++e) ss += x[i * m + e] * x[i * m + e];
    norm[i] = std::sqrt(ss);
  }
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t p, int64_t q) { return norm[p] > norm[q]; });
  Svd out;
  out.k = k;
  out.u.assign(static_cast<size_t>(m * k), 0.0);
  out.s.resize(static_cast<size_t>(k));
  out.vt.resize(static_cast<size_t>(k * n));
  for (int64_t q = 0; q < k; ++q) {
    const int64_t i = order[q];
    out.s[q] = norm[i];
    for (int64_t e = 0; e < m; ++e) out.u[e * k + q] = norm[i] > 0 ? x[i * m + e] / norm[i] : 0.0;
    // v was rotated as rows: row i holds the i-th right singular vector's coordinates.
    for (int64_t e = 0; e < n; ++e) out.vt[q * n + e] = v[i * n + e];
  }
  return out;
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
  if (n <= m) return svd_tall(a, m, n, k);
  // Aᵀ = U'·S·V'ᵀ  ⇒  A = V'·S·U'ᵀ.
  const Svd t = svd_tall(transposed(a, m, n), n, m, k);
  Svd out;
  out.k = k;
  out.s = t.s;
  out.u = transposed(t.vt, k, m);   // [m, k]
  out.vt = transposed(t.u, n, k);   // [k, n]
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
