// GaLore / APOLLO projections (see projector.h): bases from an f64 SVD or a seeded Gaussian, and
// the small matrix products around them.
#include "train/projector.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "nn/svd.h"

namespace unillm::train {
namespace {

// c [m, n] = alpha · op(a) · op(b), op(a) [m, k] (a is [k, m] when ta), op(b) [k, n] (b is [n, k]
// when tb). One output row per thread: the result does not depend on the thread count.
void mm(const float* a, bool ta, const float* b, bool tb, int64_t m, int64_t k, int64_t n,
        float alpha, float* c) {
#pragma omp parallel for schedule(static) if (m * n * k > (1 << 16))
  for (int64_t i = 0; i < m; ++i) {
    std::vector<double> row(static_cast<size_t>(n), 0.0);
    for (int64_t q = 0; q < k; ++q) {
      const double x = ta ? a[q * m + i] : a[i * k + q];
      if (x == 0) continue;
      if (tb)
        for (int64_t j = 0; j < n; ++j) row[j] += x * b[j * k + q];
      else
        for (int64_t j = 0; j < n; ++j) row[j] += x * b[q * n + j];
    }
    for (int64_t j = 0; j < n; ++j) c[i * n + j] = static_cast<float>(alpha * row[j]);
  }
}

// Flips the vector x[0], x[stride], … (n entries) so its largest-magnitude entry is positive.
void fix_sign(float* x, int64_t n, int64_t stride) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (std::fabs(x[i * stride]) > std::fabs(x[best * stride])) best = i;
  if (x[best * stride] < 0)
    for (int64_t i = 0; i < n; ++i) x[i * stride] = -x[i * stride];
}

}  // namespace

ProjShape projection_shape(const std::string& proj_type, int64_t rows, int64_t cols, int64_t rank,
                           bool svd) {
  ProjShape s;
  s.rows = rows;
  s.cols = cols;
  s.r = svd ? std::min({rank, rows, cols}) : rank;
  const bool tall = rows >= cols;
  if (proj_type == "std")
    s.side = tall ? ProjSide::kRight : ProjSide::kLeft;
  else if (proj_type == "reverse_std")
    s.side = tall ? ProjSide::kLeft : ProjSide::kRight;
  else if (proj_type == "right")
    s.side = ProjSide::kRight;
  else if (proj_type == "left")
    s.side = ProjSide::kLeft;
  else if (proj_type == "full")
    s.side = ProjSide::kFull;
  else
    UNILLM_THROW(ConfigError, "[optim] projection type '", proj_type,
                 "' is not one of std, reverse_std, right, left, full");
  return s;
}

void svd_basis(const float* g, const ProjShape& s, float* left, float* right) {
  std::vector<double> a(g, g + s.rows * s.cols);
  const nn::Svd d = nn::svd_top(a, s.rows, s.cols, s.r);  // u [rows, r], vt [r, cols]
  if (s.side != ProjSide::kRight) {
    for (int64_t i = 0; i < s.rows * s.r; ++i) left[i] = static_cast<float>(d.u[i]);
    for (int64_t q = 0; q < s.r; ++q) fix_sign(left + q, s.rows, s.r);  // column q
  }
  if (s.side != ProjSide::kLeft) {
    for (int64_t i = 0; i < s.r * s.cols; ++i) right[i] = static_cast<float>(d.vt[i]);
    for (int64_t q = 0; q < s.r; ++q) fix_sign(right + q * s.cols, s.cols, 1);  // row q
  }
}

std::vector<float> torch_randn(uint64_t seed, int64_t n) {
  std::mt19937 gen(static_cast<uint32_t>(seed & 0xffffffffu));  // at::mt19937 is the standard one
  std::vector<float> d(static_cast<size_t>(n));
  if (n < 16) {  // normal_distribution<double>: Box–Muller on two 53-bit uniforms, sin cached
    auto uniform = [&gen] {
      const uint64_t hi = gen(), lo = gen();
      return static_cast<double>(((hi << 32) | lo) & ((uint64_t{1} << 53) - 1)) * 0x1.0p-53;
    };
    for (int64_t i = 0; i < n; i += 2) {
      const double u1 = uniform(), u2 = uniform();
      const double r = std::sqrt(-2.0 * std::log1p(-u2)), theta = 2.0 * M_PI * u1;
      d[i] = static_cast<float>(r * std::cos(theta));
      if (i + 1 < n) d[i + 1] = static_cast<float>(r * std::sin(theta));
    }
    return d;
  }
  auto uniform = [&gen] { return static_cast<float>((gen() & 0xffffffu) * 0x1.0p-24); };
  auto fill16 = [](float* x) {  // normal_fill_16: pairs (j, j + 8)
    for (int j = 0; j < 8; ++j) {
      const float u1 = 1.0f - x[j], u2 = x[j + 8];
      const float radius = std::sqrt(-2.0f * std::log(u1));
      const float theta = 2.0f * static_cast<float>(M_PI) * u2;
      x[j] = radius * std::cos(theta);
      x[j + 8] = radius * std::sin(theta);
    }
  };
  for (auto& x : d) x = uniform();
  for (int64_t i = 0; i + 16 <= n; i += 16) fill16(d.data() + i);
  if (n % 16 != 0) {  // torch redraws the last 16 values
    for (int64_t i = n - 16; i < n; ++i) d[i] = uniform();
    fill16(d.data() + n - 16);
  }
  return d;
}

void random_basis(const ProjShape& s, uint64_t seed, float* left, float* right) {
  UNILLM_CHECK(s.side != ProjSide::kFull,
               "[optim] a random projection is one-sided (left or right)");
  float* out = s.side == ProjSide::kLeft ? left : right;
  const int64_t n = s.side == ProjSide::kLeft ? s.left_size() : s.right_size();
  const std::vector<float> z = torch_randn(seed, n);
  const auto root = static_cast<float>(std::sqrt(static_cast<double>(s.r)));  // a Python float
  for (int64_t i = 0; i < n; ++i) out[i] = z[i] / root;
}

uint64_t next_projection_seed(uint64_t seed) {
  std::mt19937 gen(static_cast<uint32_t>(seed & 0xffffffffu));
  uint64_t x = 0;
  for (int i = 0; i < 15; ++i) {  // random_from_to over a range >= 2^32: random64() % range
    const uint64_t hi = gen(), lo = gen();
    x = ((hi << 32) | lo) % ((uint64_t{1} << 63) - 1);
  }
  return x;
}

void project(const float* g, const ProjShape& s, const float* left, const float* right,
             float* low) {
  switch (s.side) {
    case ProjSide::kLeft:  // Pᵀ [r, rows] · G [rows, cols]
      mm(left, true, g, false, s.r, s.rows, s.cols, 1.0f, low);
      break;
    case ProjSide::kRight:  // G [rows, cols] · Qᵀ [cols, r]
      mm(g, false, right, true, s.rows, s.cols, s.r, 1.0f, low);
      break;
    case ProjSide::kFull: {
      std::vector<float> t(static_cast<size_t>(s.r * s.cols));  // Pᵀ·G [r, cols]
      mm(left, true, g, false, s.r, s.rows, s.cols, 1.0f, t.data());
      mm(t.data(), false, right, true, s.r, s.cols, s.r, 1.0f, low);
      break;
    }
  }
}

void project_back(const float* low, const ProjShape& s, const float* left, const float* right,
                  float scale, float* out) {
  switch (s.side) {
    case ProjSide::kLeft:  // P [rows, r] · low [r, cols]
      mm(left, false, low, false, s.rows, s.r, s.cols, scale, out);
      break;
    case ProjSide::kRight:  // low [rows, r] · Q [r, cols]
      mm(low, false, right, false, s.rows, s.r, s.cols, scale, out);
      break;
    case ProjSide::kFull: {
      std::vector<float> t(static_cast<size_t>(s.rows * s.r));  // P·low [rows, r]
      mm(left, false, low, false, s.rows, s.r, s.r, 1.0f, t.data());
      mm(t.data(), false, right, false, s.rows, s.r, s.cols, scale, out);
      break;
    }
  }
}

}  // namespace unillm::train
