// PiSSA's and GaLore's SVDs and PiSSA's init: the exact SVD (LAPACK) reconstructs wide, tall and
// large matrices with orthonormal factors and descending singular values equal to the roots of
// the Gram matrix's eigenvalues (found by a Jacobi eigensolver here), truncates to the leading
// triplets and refuses NaN; subspace iteration recovers an exactly low-rank matrix and
// approximates a full one no worse than the full SVD allows; FusedLinear::pissa_init keeps
// W = residual + s·B·A on each part and removing the adapter gives W back.
#include "nn/svd.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/rng.h"
#include "nn/linear.h"
#include "support/expect.h"

namespace unillm::nn {
namespace {

std::vector<double> random_matrix(int64_t m, int64_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<double> a(static_cast<size_t>(m * n));
  for (auto& v : a) v = rng.normal();
  return a;
}

// max |A − U·S·Vt| over the k kept triplets.
double reconstruction_error(const std::vector<double>& a, const Svd& s, int64_t m, int64_t n) {
  double worst = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double v = 0;
      for (int64_t q = 0; q < s.k; ++q) v += s.u[i * s.k + q] * s.s[q] * s.vt[q * n + j];
      worst = std::max(worst, std::fabs(v - a[i * n + j]));
    }
  return worst;
}

void expect_orthonormal(const Svd& s, int64_t m, int64_t n) {
  for (int64_t p = 0; p < s.k; ++p)
    for (int64_t q = 0; q < s.k; ++q) {
      double uu = 0, vv = 0;
      for (int64_t i = 0; i < m; ++i) uu += s.u[i * s.k + p] * s.u[i * s.k + q];
      for (int64_t j = 0; j < n; ++j) vv += s.vt[p * n + j] * s.vt[q * n + j];
      EXPECT_NEAR(uu, p == q ? 1.0 : 0.0, 1e-12);
      EXPECT_NEAR(vv, p == q ? 1.0 : 0.0, 1e-12);
    }
}

TEST(Svd, FullReconstructsTallAndWide) {
  for (auto [m, n] : {std::pair<int64_t, int64_t>{9, 5}, {5, 9}, {12, 12}}) {
    SCOPED_TRACE(std::to_string(m) + "x" + std::to_string(n));
    const auto a = random_matrix(m, n, 7 + m);
    const Svd s = svd_top(a, m, n, std::min(m, n));
    EXPECT_LE(reconstruction_error(a, s, m, n), 1e-12);
    expect_orthonormal(s, m, n);
    for (size_t q = 1; q < s.s.size(); ++q) EXPECT_GE(s.s[q - 1], s.s[q]);
    // Σ σ² = ‖A‖_F² (the trace of AᵀA).
    double fro = 0, sig = 0;
    for (double v : a) fro += v * v;
    for (double v : s.s) sig += v * v;
    EXPECT_NEAR(sig, fro, 1e-10 * fro);
  }
}

// Eigenvalues of the symmetric g [n, n], descending: cyclic Jacobi rotations (gᵀ·J on both
// sides) until the off-diagonal part vanishes. Independent of LAPACK and of the SVD code.
std::vector<double> symmetric_eigenvalues(std::vector<double> g, int64_t n) {
  for (int sweep = 0; sweep < 60; ++sweep) {
    double off = 0, diag = 0;
    for (int64_t p = 0; p < n; ++p) {
      diag += g[p * n + p] * g[p * n + p];
      for (int64_t q = p + 1; q < n; ++q) off += g[p * n + q] * g[p * n + q];
    }
    if (off <= 1e-32 * diag) break;
    for (int64_t p = 0; p < n; ++p)
      for (int64_t q = p + 1; q < n; ++q) {
        const double apq = g[p * n + q];
        if (apq == 0) continue;
        const double theta = (g[q * n + q] - g[p * n + p]) / (2 * apq);
        const double t =
            (theta >= 0 ? 1.0 : -1.0) / (std::fabs(theta) + std::sqrt(theta * theta + 1));
        const double c = 1 / std::sqrt(t * t + 1), s = t * c;
        for (int64_t e = 0; e < n; ++e) {  // columns p, q
          const double ep = g[e * n + p], eq = g[e * n + q];
          g[e * n + p] = c * ep - s * eq;
          g[e * n + q] = s * ep + c * eq;
        }
        for (int64_t e = 0; e < n; ++e) {  // rows p, q
          const double pe = g[p * n + e], qe = g[q * n + e];
          g[p * n + e] = c * pe - s * qe;
          g[q * n + e] = s * pe + c * qe;
        }
      }
  }
  std::vector<double> ev(static_cast<size_t>(n));
  for (int64_t p = 0; p < n; ++p) ev[p] = g[p * n + p];
  std::sort(ev.begin(), ev.end(), std::greater<>());
  return ev;
}

// The smaller Gram matrix of a [m, n]: A·Aᵀ [m, m] when wide, Aᵀ·A [n, n] when tall.
std::vector<double> small_gram(const std::vector<double>& a, int64_t m, int64_t n) {
  const bool wide = m < n;
  const int64_t p = std::min(m, n), len = std::max(m, n);
  auto at = [&](int64_t i, int64_t e) { return wide ? a[i * n + e] : a[e * n + i]; };
  std::vector<double> g(static_cast<size_t>(p * p), 0.0);
  for (int64_t i = 0; i < p; ++i)
    for (int64_t j = 0; j <= i; ++j) {
      double v = 0;
      for (int64_t e = 0; e < len; ++e) v += at(i, e) * at(j, e);
      g[i * p + j] = g[j * p + i] = v;
    }
  return g;
}

TEST(Svd, LargeWideAndTallMatchTheGramEigenvalues) {
  for (auto [m, n] : {std::pair<int64_t, int64_t>{300, 700}, {700, 300}}) {
    SCOPED_TRACE(std::to_string(m) + "x" + std::to_string(n));
    const int64_t p = std::min(m, n);
    const auto a = random_matrix(m, n, 21 + m);
    const Svd s = svd_top(a, m, n, p);
    ASSERT_EQ(s.u.size(), static_cast<size_t>(m * p));
    ASSERT_EQ(s.vt.size(), static_cast<size_t>(p * n));
    // ‖A − U·S·Vt‖_F relative to ‖A‖_F.
    double err = 0, fro = 0;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double v = 0;
        for (int64_t q = 0; q < p; ++q) v += s.u[i * p + q] * s.s[q] * s.vt[q * n + j];
        err += (v - a[i * n + j]) * (v - a[i * n + j]);
        fro += a[i * n + j] * a[i * n + j];
      }
    EXPECT_LE(std::sqrt(err / fro), 1e-10);
    expect_orthonormal(s, m, n);
    const std::vector<double> ev = symmetric_eigenvalues(small_gram(a, m, n), p);
    for (int64_t q = 0; q < p; ++q) EXPECT_NEAR(s.s[q], std::sqrt(ev[q]), 1e-10 * s.s[0]) << q;
  }
}

TEST(Svd, TopKIsTheLeadingPartOfTheFullSvd) {
  // Truncation keeps U's first k columns (a strided copy) and Vt's first k rows.
  for (auto [m, n] : {std::pair<int64_t, int64_t>{40, 90}, {90, 40}}) {
    SCOPED_TRACE(std::to_string(m) + "x" + std::to_string(n));
    const int64_t p = std::min(m, n), k = 7;
    const auto a = random_matrix(m, n, 5 + n);
    const Svd full = svd_top(a, m, n, p), top = svd_top(a, m, n, k);
    ASSERT_EQ(top.u.size(), static_cast<size_t>(m * k));
    for (int64_t q = 0; q < k; ++q) {
      EXPECT_EQ(top.s[q], full.s[q]);
      for (int64_t i = 0; i < m; ++i) EXPECT_EQ(top.u[i * k + q], full.u[i * p + q]);
      for (int64_t j = 0; j < n; ++j) EXPECT_EQ(top.vt[q * n + j], full.vt[q * n + j]);
    }
  }
}

TEST(Svd, RankDeficientAndNonFiniteInputs) {
  // A rank-2 [6, 4]: two singular values of zero, still an orthonormal U; a NaN is refused.
  const int64_t m = 6, n = 4;
  const auto l = random_matrix(m, 2, 4), r = random_matrix(2, n, 8);
  std::vector<double> a(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) a[i * n + j] = l[i * 2] * r[j] + l[i * 2 + 1] * r[n + j];
  const Svd s = svd_top(a, m, n, n);
  EXPECT_LE(reconstruction_error(a, s, m, n), 1e-12);
  expect_orthonormal(s, m, n);
  EXPECT_GT(s.s[1], 0.1);
  EXPECT_LE(s.s[2], 1e-12 * s.s[0]);
  a[5] = std::nan("");
  EXPECT_THROW(svd_top(a, m, n, 2), NumericError);
}

TEST(Svd, TruncationIsTheBestRankKApproximation) {
  // The rank-k error in the Frobenius norm is the root of the dropped σ² (Eckart–Young).
  const int64_t m = 10, n = 7, k = 3;
  const auto a = random_matrix(m, n, 3);
  const Svd full = svd_top(a, m, n, n), top = svd_top(a, m, n, k);
  double err = 0, dropped = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double v = 0;
      for (int64_t q = 0; q < k; ++q) v += top.u[i * k + q] * top.s[q] * top.vt[q * n + j];
      err += (v - a[i * n + j]) * (v - a[i * n + j]);
    }
  for (int64_t q = k; q < n; ++q) dropped += full.s[q] * full.s[q];
  EXPECT_NEAR(err, dropped, 1e-10);
}

TEST(Svd, SubspaceIterationRecoversLowRankAndIsDeterministic) {
  const int64_t m = 20, n = 14, k = 3;
  // A = L·R of rank 3.
  const auto l = random_matrix(m, k, 1), r = random_matrix(k, n, 2);
  std::vector<double> a(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t q = 0; q < k; ++q) a[i * n + j] += l[i * k + q] * r[q * n + j];
  const Svd s = svd_subspace(a, m, n, k, 2, 5);
  EXPECT_LE(reconstruction_error(a, s, m, n), 1e-10);
  const Svd s2 = svd_subspace(a, m, n, k, 2, 5);
  EXPECT_EQ(s.u, s2.u);
  EXPECT_EQ(s.vt, s2.vt);
  // On a full-rank matrix the singular values approach the exact ones with iterations.
  const auto b = random_matrix(m, n, 9);
  const Svd exact = svd_top(b, m, n, k), fast = svd_subspace(b, m, n, k, 16, 5);
  for (int64_t q = 0; q < k; ++q) EXPECT_NEAR(fast.s[q], exact.s[q], 1e-3 * exact.s[0]);
}

TEST(Pissa, ResidualPlusScaledProductIsWAndRemovalRestoresIt) {
  testing::init_cpu();  // FusedLinear allocates through the CPU backend (ctest runs one test per process)
  for (int64_t niter : {-1, 4}) {
    SCOPED_TRACE("niter " + std::to_string(niter));
    FusedLinear f(8, {{"q_proj", 6}, {"k_proj", 4}, {"v_proj", 4}}, false, DType::f32);
    Rng rng(11);
    std::vector<float> w(14 * 8);
    for (auto& v : w) v = static_cast<float>(rng.normal());
    f.weight().detach().copy_from(Tensor::from_vector(w, {14, 8}));
    LoraConfig c;
    c.rank = 2;
    c.alpha = 3;
    c.target_modules = {"q_proj", "v_proj"};
    f.add_lora("p", c, {0, 2}, rng, 1);
    f.pissa_init("p", niter, 99);
    const LoraWeights* lw = f.lora("p");
    const std::vector<float> res = f.weight().to_float_vector(), a = lw->a.to_float_vector(),
                             b = lw->b.to_float_vector();
    // q rows [0, 6) use A rows [0, 2) and B rows [0, 6); v rows [10, 14) use A [2, 4), B [6, 10).
    double worst = 0, moved = 0;
    for (int64_t row = 0; row < 14; ++row) {
      const bool q = row < 6, v = row >= 10;
      for (int64_t e = 0; e < 8; ++e) {
        double ba = 0;
        for (int64_t r = 0; r < 2 && (q || v); ++r) {
          const int64_t arow = (q ? 0 : 2) + r, brow = q ? row : 6 + row - 10;
          ba += b[brow * 2 + r] * a[arow * 8 + e];
        }
        worst = std::max(worst, std::fabs(res[row * 8 + e] + c.scaling() * ba - w[row * 8 + e]));
        moved = std::max(moved, std::fabs(double(res[row * 8 + e]) - w[row * 8 + e]));
      }
    }
    EXPECT_LE(worst, 1e-5);
    EXPECT_GT(moved, 0.1);  // the principal part really left W
    f.remove_lora("p");
    const std::vector<float> back = f.weight().to_float_vector();
    for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(back[i], w[i], 1e-5);
  }
}

}  // namespace
}  // namespace unillm::nn
