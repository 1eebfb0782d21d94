// Thin host wrappers over LAPACK (from the OpenBLAS every build links). Row-major f64 in and out;
// the column-major bookkeeping stays inside lapack.cpp.
#pragma once

#include <cstdint>
#include <vector>

namespace unillm::lapack {

// Thin SVD of a [m, n] (row-major): A = U·diag(S)·Vt with p = min(m, n) singular values,
// descending. The outputs are resized: u [m, p] (orthonormal columns), s [p], vt [p, n]
// (orthonormal rows). `a` is taken by value because LAPACK destroys it. Signs are LAPACK's
// (deterministic for a given input and thread count). Throws NumericError when A holds a NaN or
// inf (LAPACK's result is undefined there) or when dgesdd reports failure (info != 0).
void gesdd(int64_t m, int64_t n, std::vector<double> a, std::vector<double>& u,
           std::vector<double>& s, std::vector<double>& vt);

}  // namespace unillm::lapack
