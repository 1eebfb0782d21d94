// dgesdd (divide-and-conquer SVD) through its Fortran symbol: OpenBLAS exports LAPACK but the
// Debian cblas.h/lapacke headers are optional, so the one prototype needed is declared here.
#include "core/lapack.h"

#include <algorithm>
#include <climits>
#include <cmath>

#include "core/error.h"

extern "C" {
// LAPACK's LP64 interface (Debian's libopenblas0-openmp): 32-bit integers, column-major arrays,
// everything by pointer. `jobz_len` is the hidden length of the character argument (gfortran).
void dgesdd_(const char* jobz, const int* m, const int* n, double* a, const int* lda, double* s,
             double* u, const int* ldu, double* vt, const int* ldvt, double* work, const int* lwork,
             int* iwork, int* info, size_t jobz_len);
}

namespace unillm::lapack {
namespace {

// One dgesdd call with jobz = 'S' on the column-major [rows, cols] matrix `a`; `lwork` = -1 asks
// for the workspace size in work[0].
int call_gesdd(int rows, int cols, double* a, double* s, double* u, double* vt, double* work,
               int lwork, int* iwork) {
  const char jobz = 'S';
  const int p = std::min(rows, cols);
  int info = 0;
  dgesdd_(&jobz, &rows, &cols, a, &rows, s, u, &rows, vt, &p, work, &lwork, iwork, &info, 1);
  return info;
}

void check_info(int info, int64_t m, int64_t n) {
  if (info < 0)  // a bad argument is our bug, not the data's
    UNILLM_THROW(NumericError, "[lapack] dgesdd rejected argument ", -info, " for a [", m, ", ", n,
                 "] matrix (info ", info, ")");
  if (info > 0)
    UNILLM_THROW(NumericError, "[lapack] dgesdd did not converge on a [", m, ", ", n,
                 "] matrix (info ", info, ": the bidiagonal divide-and-conquer failed)");
}

}  // namespace

void gesdd(int64_t m, int64_t n, std::vector<double> a, std::vector<double>& u,
           std::vector<double>& s, std::vector<double>& vt) {
  if (m <= 0 || n <= 0 || static_cast<int64_t>(a.size()) != m * n)
    UNILLM_THROW(ShapeError, "[lapack] dgesdd: ", a.size(), " values for a [", m, ", ", n,
                 "] matrix");
  if (m > INT_MAX || n > INT_MAX)
    UNILLM_THROW(ShapeError, "[lapack] dgesdd: a [", m, ", ", n,
                 "] matrix exceeds LAPACK's 32-bit indices");
  for (double v : a)
    if (!std::isfinite(v))
      UNILLM_THROW(NumericError, "[lapack] dgesdd: the [", m, ", ", n,
                   "] matrix holds a NaN or inf");
  // Row-major A [m, n] is column-major Aᵀ [n, m]. LAPACK factors Aᵀ = U'·S·V'ᵀ, so A = V'·S·U'ᵀ:
  // V'ᵀ column-major [p, m] read row-major is V' [m, p] = our U, and U' column-major [n, p] read
  // row-major is U'ᵀ [p, n] = our Vt. Passing our vt buffer as LAPACK's U (and u as VT) needs no
  // copy or transpose.
  const int rows = static_cast<int>(n), cols = static_cast<int>(m);
  const int64_t p = std::min(m, n);
  u.resize(static_cast<size_t>(m * p));
  s.resize(static_cast<size_t>(p));
  vt.resize(static_cast<size_t>(p * n));
  std::vector<int> iwork(static_cast<size_t>(8 * p));
  auto run = [&](double* work, int lwork) {
    const int info =
        call_gesdd(rows, cols, a.data(), s.data(), vt.data(), u.data(), work, lwork, iwork.data());
    check_info(info, m, n);
  };
  double query = 0;
  run(&query, -1);  // workspace query: the optimal lwork comes back in query
  if (query >= INT_MAX)
    UNILLM_THROW(ShapeError, "[lapack] dgesdd: a [", m, ", ", n, "] matrix needs ", query,
                 " workspace values, beyond LAPACK's 32-bit indices");
  std::vector<double> work(static_cast<size_t>(query) + 1);
  run(work.data(), static_cast<int>(work.size()));
}

}  // namespace unillm::lapack
