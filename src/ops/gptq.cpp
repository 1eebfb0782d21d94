// GPTQ on the host (a load-time step, like quantize_weight): Cholesky factorisations in double,
// then the column sweep per row, rows in parallel.
#include "ops/gptq.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "core/parallel.h"
#include "ops/dispatch.h"
#include "ops/quant_codes.h"

namespace unillm::ops {
namespace {

using Matrix = std::vector<double>;  // row-major K × K

// Lower Cholesky factor L of a (a = L·Lᵀ) in place of a's lower triangle; false when a is not
// positive definite.
bool cholesky_lower(Matrix& a, int64_t k) {
  for (int64_t j = 0; j < k; ++j) {
    double d = a[j * k + j];
    for (int64_t p = 0; p < j; ++p) d -= a[j * k + p] * a[j * k + p];
    if (!(d > 0)) return false;
    const double ljj = std::sqrt(d);
    a[j * k + j] = ljj;
    parallel_for(k - j - 1, 64, [&](int64_t lo, int64_t hi) {
      for (int64_t i = j + 1 + lo; i < j + 1 + hi; ++i) {
        double s = a[i * k + j];
        for (int64_t p = 0; p < j; ++p) s -= a[i * k + p] * a[j * k + p];
        a[i * k + j] = s / ljj;
      }
    });
  }
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = i + 1; j < k; ++j) a[i * k + j] = 0;
  return true;
}

// H⁻¹ from H's lower Cholesky factor L: H⁻¹ = L⁻ᵀ·L⁻¹, with L⁻¹ by forward substitution.
Matrix inverse_from_cholesky(const Matrix& l, int64_t k) {
  Matrix li(static_cast<size_t>(k * k), 0.0);  // L⁻¹, lower
  parallel_for(k, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) {  // column c of L⁻¹ solves L·x = e_c
      li[c * k + c] = 1.0 / l[c * k + c];
      for (int64_t i = c + 1; i < k; ++i) {
        double s = 0;
        for (int64_t p = c; p < i; ++p) s -= l[i * k + p] * li[p * k + c];
        li[i * k + c] = s / l[i * k + i];
      }
    }
  });
  Matrix inv(static_cast<size_t>(k * k), 0.0);
  parallel_for(k, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      for (int64_t j = 0; j <= i; ++j) {
        double s = 0;  // Σ_p L⁻¹[p, i] · L⁻¹[p, j], p ≥ max(i, j) = i
        for (int64_t p = i; p < k; ++p) s += li[p * k + i] * li[p * k + j];
        inv[i * k + j] = s;
      }
  });
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = i + 1; j < k; ++j) inv[i * k + j] = inv[j * k + i];
  return inv;
}

// U (upper, H⁻¹ = Uᵀ·U) for the damped H, or nullopt when H is not positive definite.
std::optional<Matrix> upper_factor_of_inverse(Matrix h, int64_t k, double damp) {
  double mean_diag = 0;
  for (int64_t i = 0; i < k; ++i) mean_diag += h[i * k + i];
  mean_diag /= static_cast<double>(k);
  for (int64_t i = 0; i < k; ++i) h[i * k + i] += damp * mean_diag;
  if (!cholesky_lower(h, k)) return std::nullopt;
  Matrix inv = inverse_from_cholesky(h, k);
  if (!cholesky_lower(inv, k)) return std::nullopt;
  // Uᵀ·U = H⁻¹ with U = Lᵀ of H⁻¹'s lower factor.
  Matrix u(static_cast<size_t>(k * k), 0.0);
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = i; j < k; ++j) u[i * k + j] = inv[j * k + i];
  return u;
}

}  // namespace

QuantizedWeight gptq_quantize_weight(const Tensor& w_in, const Tensor& hessian, QuantType type, int64_t group,
                                     bool symmetric, double damp, const std::string& what, DType scale_dtype,
                                     bool act_order) {
  check_defined("gptq", "w", w_in);
  check_defined("gptq", "hessian", hessian);
  check_ndim("gptq", "w", w_in, 2);
  const int64_t n = w_in.size(0), k = w_in.size(1);
  if (hessian.shape() != Shape{k, k})
    UNILLM_THROW(ShapeError, "[gptq] ", what, ": hessian has shape ", shape_str(hessian.shape()), ", expected [", k,
                 ", ", k, "]");
  // The layout and the checks (codes and scales are then recomputed).
  QuantizedWeight q = quantize_weight(w_in, type, group, symmetric, scale_dtype, what);
  q.data = Tensor::zeros(q.data.shape(), q.data.dtype());
  q.scales = Tensor::empty(q.scales.shape(), scale_dtype);
  if (q.mins.defined()) q.mins = Tensor::empty(q.mins.shape(), scale_dtype);

  Matrix h(static_cast<size_t>(k * k));
  const Tensor hc = hessian.to(Device{}).to(DType::f64).contiguous();
  std::copy(hc.data<double>(), hc.data<double>() + k * k, h.begin());
  const Tensor w32 = w_in.to(Device{}).to(DType::f32).contiguous();
  std::vector<double> w(w32.data<float>(), w32.data<float>() + n * k);
  for (int64_t i = 0; i < k; ++i)
    if (h[i * k + i] == 0) {  // an input that never fired: its weights cannot matter
      h[i * k + i] = 1;
      for (int64_t r = 0; r < n; ++r) w[r * k + i] = 0;
    }
  // The sweep order: column perm[i] is the i-th quantised; H is permuted to match.
  std::vector<int64_t> perm(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) perm[i] = i;
  if (act_order) {
    std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) { return h[a * k + a] > h[b * k + b]; });
    Matrix hp(static_cast<size_t>(k * k));
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j < k; ++j) hp[i * k + j] = h[perm[i] * k + perm[j]];
    h = std::move(hp);
  }
  std::optional<Matrix> u;
  for (double d = damp; d <= damp * 1000 && !u; d *= 10) u = upper_factor_of_inverse(h, k, d);
  if (!u)
    UNILLM_THROW(ConfigError, "[gptq] ", what, ": the calibration Hessian is not positive definite even with ",
                 damp * 1000, " damping (too few or degenerate calibration rows?)");
  const int64_t G = q.groups();
  void* scales = q.scales.raw_data();
  void* mins = q.mins.defined() ? q.mins.raw_data() : nullptr;
  void* codes = q.data.raw_data();
  const Matrix& U = *u;
  parallel_for(n, 1, [&](int64_t lo, int64_t hi) {
    std::vector<float> grp(static_cast<size_t>(q.group));
    std::vector<quant_detail::GroupScale> fixed(static_cast<size_t>(act_order ? G : 0));
    for (int64_t r = lo; r < hi; ++r) {
      double* row = w.data() + r * k;
      if (act_order) {
        for (int64_t g = 0; g < G; ++g) {  // static groups: fitted before any update
          const int64_t i = g * q.group, len = std::min(q.group, k - i);
          for (int64_t j = 0; j < len; ++j) grp[j] = static_cast<float>(row[i + j]);
          fixed[g] = quant_detail::stored_as(quant_detail::group_scale(grp.data(), len, type, q.symmetric),
                                             scale_dtype, what);
          quant_detail::store_scale(scales, scale_dtype, r * G + g, fixed[g].scale);
          if (mins) quant_detail::store_scale(mins, scale_dtype, r * G + g, fixed[g].lo);
        }
        for (int64_t i = 0; i < k; ++i) {
          const int64_t col = perm[i];
          const quant_detail::GroupScale& s = fixed[col / q.group];
          const int c = quant_detail::code_of(static_cast<float>(row[col]), s, type, q.symmetric);
          quant_detail::store_code(codes, type, k, r, col, c);
          const double e = (row[col] - quant_detail::value_of(c, s.scale, s.lo, type, q.symmetric)) / U[i * k + i];
          const double* urow = U.data() + i * k;
          for (int64_t j = i + 1; j < k; ++j) row[perm[j]] -= e * urow[j];
        }
        continue;
      }
      quant_detail::GroupScale s;
      for (int64_t i = 0; i < k; ++i) {
        if (i % q.group == 0) {
          const int64_t g = i / q.group, len = std::min(q.group, k - i);
          for (int64_t j = 0; j < len; ++j) grp[j] = static_cast<float>(row[i + j]);
          s = quant_detail::stored_as(quant_detail::group_scale(grp.data(), len, type, q.symmetric), scale_dtype,
                                      what);
          quant_detail::store_scale(scales, scale_dtype, r * G + g, s.scale);
          if (mins) quant_detail::store_scale(mins, scale_dtype, r * G + g, s.lo);
        }
        const int c = quant_detail::code_of(static_cast<float>(row[i]), s, type, q.symmetric);
        // Bytes of u4x2 rows are shared by two columns, but a row's bytes belong to this thread.
        quant_detail::store_code(codes, type, k, r, i, c);
        const double e = (row[i] - quant_detail::value_of(c, s.scale, s.lo, type, q.symmetric)) / U[i * k + i];
        const double* urow = U.data() + i * k;
        for (int64_t j = i + 1; j < k; ++j) row[j] -= e * urow[j];
      }
    }
  });
  const Device device = w_in.device();
  q.data = q.data.to(device);
  q.scales = q.scales.to(device);
  if (q.mins.defined()) q.mins = q.mins.to(device);
  return q;
}

}  // namespace unillm::ops
