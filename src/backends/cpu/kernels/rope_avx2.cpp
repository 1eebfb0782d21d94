// AVX2 rope for f32: the per-token cos/sin table (f32 angle, f32 cos/sin like HF) is applied to all
// heads with vector multiplies (mul then add, no FMA, to stay closest to PyTorch's rounding).
#include "backends/cpu/kernels/rope_avx2.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cpu/simd/vec_avx2.h"
#include "core/parallel.h"

namespace unillm::cpu::avx2 {
namespace {

void rotate_head(const float* x, const float* cs, const float* sn, float* y, int64_t half) {
  int64_t i = 0;
  for (; i + 8 <= half; i += 8) {
    __m256 x1 = _mm256_loadu_ps(x + i), x2 = _mm256_loadu_ps(x + i + half);
    __m256 c = _mm256_loadu_ps(cs + i), s = _mm256_loadu_ps(sn + i);
    _mm256_storeu_ps(y + i, _mm256_sub_ps(_mm256_mul_ps(x1, c), _mm256_mul_ps(x2, s)));
    _mm256_storeu_ps(y + i + half, _mm256_add_ps(_mm256_mul_ps(x2, c), _mm256_mul_ps(x1, s)));
  }
  for (; i < half; ++i) {
    float p = x[i] * cs[i], q = x[i + half] * sn[i];
    float r = x[i + half] * cs[i], u = x[i] * sn[i];
    y[i] = p - q;
    y[i + half] = r + u;
  }
}

}  // namespace

void rope_f32(const ops::RopeArgs& a) {
  const int64_t half = a.rot_dim / 2, d = a.head_dim;
  const auto* x = static_cast<const float*>(a.x);
  auto* out = static_cast<float*>(a.out);
  parallel_for(a.n, std::max<int64_t>(1, 8192 / (a.heads * d)), [&](int64_t lo, int64_t hi) {
    std::vector<float> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
    for (int64_t t = lo; t < hi; ++t) {
      for (int64_t i = 0; i < half; ++i) {
        float ang = static_cast<float>(a.positions[t]) * a.inv_freq[i];
        cs[i] = std::cos(ang);
        sn[i] = std::sin(ang);
      }
      for (int64_t h = 0; h < a.heads; ++h) {
        const float* xr = x + (t * a.heads + h) * d;
        float* yr = out + (t * a.heads + h) * d;
        rotate_head(xr, cs.data(), sn.data(), yr, half);
        if (a.rot_dim < d)
          std::memcpy(yr + a.rot_dim, xr + a.rot_dim, (d - a.rot_dim) * sizeof(float));
      }
    }
  });
}

void rope_qkv_f32(const ops::RopeQkvArgs& a) {
  const int64_t half = a.rot_dim / 2, d = a.head_dim, width = (a.heads + 2 * a.kv_heads) * d;
  parallel_for(a.n, std::max<int64_t>(1, 8192 / width), [&](int64_t lo, int64_t hi) {
    std::vector<float> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
    auto head = [&](const float* xr, float* yr) {
      rotate_head(xr, cs.data(), sn.data(), yr, half);
      if (a.rot_dim < d) std::memcpy(yr + a.rot_dim, xr + a.rot_dim, (d - a.rot_dim) * sizeof(float));
    };
    for (int64_t t = lo; t < hi; ++t) {
      for (int64_t i = 0; i < half; ++i) {
        float ang = static_cast<float>(a.positions[t]) * a.inv_freq[i];
        cs[i] = std::cos(ang);
        sn[i] = std::sin(ang);
      }
      const float* row = a.qkv + t * width;
      for (int64_t h = 0; h < a.heads; ++h) head(row + h * d, a.q + (t * a.heads + h) * d);
      for (int64_t h = 0; h < a.kv_heads; ++h) head(row + (a.heads + h) * d, a.k + (t * a.kv_heads + h) * d);
      std::memcpy(a.v + t * a.kv_heads * d, row + (a.heads + a.kv_heads) * d, a.kv_heads * d * sizeof(float));
    }
  });
}

}  // namespace unillm::cpu::avx2
