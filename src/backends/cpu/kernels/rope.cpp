// CPU rope kernels: per token the cos/sin table is computed once (f32 angle and f32 cos/sin for f32,
// as HF does; double for f64) and applied to every head. Parallel over tokens. The AVX2 f32 kernel
// is rope_avx2.cpp.
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cpu/kernels/register_kernels.h"
#include "backends/cpu/kernels/rope_avx2.h"
#include "backends/cpu/simd/simd.h"
#include "core/parallel.h"
#include "core/registry.h"
#include "ops/rope.h"
#include "ops/rope_qkv.h"

namespace unillm::cpu {
namespace {

using ops::RopeArgs;

template <typename T>
void rope_portable(const RopeArgs& a) {
  const int64_t half = a.rot_dim / 2, d = a.head_dim;
  const auto* x = static_cast<const T*>(a.x);
  auto* out = static_cast<T*>(a.out);
  parallel_for(a.n, std::max<int64_t>(1, 4096 / (a.heads * d)), [&](int64_t lo, int64_t hi) {
    std::vector<T> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
    for (int64_t t = lo; t < hi; ++t) {
      for (int64_t i = 0; i < half; ++i) {
        T ang = static_cast<T>(a.positions[t]) * static_cast<T>(a.inv_freq[i]);
        cs[i] = std::cos(ang);
        sn[i] = std::sin(ang);
      }
      for (int64_t h = 0; h < a.heads; ++h) {
        const T* xr = x + (t * a.heads + h) * d;
        T* yr = out + (t * a.heads + h) * d;
        for (int64_t i = 0; i < half; ++i) {
          yr[i] = xr[i] * cs[i] - xr[i + half] * sn[i];
          yr[i + half] = xr[i + half] * cs[i] + xr[i] * sn[i];
        }
        if (a.rot_dim < d) std::memcpy(yr + a.rot_dim, xr + a.rot_dim, (d - a.rot_dim) * sizeof(T));
      }
    }
  });
}

// rope_portable<float>'s rotation for q and k heads read from the fused projection row.
void rope_qkv_portable(const ops::RopeQkvArgs& a) {
  const int64_t half = a.rot_dim / 2, d = a.head_dim, width = (a.heads + 2 * a.kv_heads) * d;
  parallel_for(a.n, std::max<int64_t>(1, 4096 / width), [&](int64_t lo, int64_t hi) {
    std::vector<float> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
    auto rotate = [&](const float* xr, float* yr) {
      for (int64_t i = 0; i < half; ++i) {
        yr[i] = xr[i] * cs[i] - xr[i + half] * sn[i];
        yr[i + half] = xr[i + half] * cs[i] + xr[i] * sn[i];
      }
      if (a.rot_dim < d) std::memcpy(yr + a.rot_dim, xr + a.rot_dim, (d - a.rot_dim) * sizeof(float));
    };
    for (int64_t t = lo; t < hi; ++t) {
      for (int64_t i = 0; i < half; ++i) {
        float ang = static_cast<float>(a.positions[t]) * a.inv_freq[i];
        cs[i] = std::cos(ang);
        sn[i] = std::sin(ang);
      }
      const float* row = a.qkv + t * width;
      for (int64_t h = 0; h < a.heads; ++h) rotate(row + h * d, a.q + (t * a.heads + h) * d);
      for (int64_t h = 0; h < a.kv_heads; ++h) rotate(row + (a.heads + h) * d, a.k + (t * a.kv_heads + h) * d);
      std::memcpy(a.v + t * a.kv_heads * d, row + (a.heads + a.kv_heads) * d, a.kv_heads * d * sizeof(float));
    }
  });
}

}  // namespace

void register_rope() {
  auto& reg = kernel_registry();
  reg.add<ops::RopeKernel>("rope", DeviceKind::cpu, DType::f32,
                           has_avx2() ? &avx2::rope_f32 : &rope_portable<float>, "",
                           avx2_or_portable());
  reg.add<ops::RopeKernel>("rope", DeviceKind::cpu, DType::f64, &rope_portable<double>, "",
                           kPortable);
  reg.add<ops::RopeQkvKernel>("rope_qkv", DeviceKind::cpu, DType::f32,
                              has_avx2() ? &avx2::rope_qkv_f32 : &rope_qkv_portable, "", avx2_or_portable());
}

}  // namespace unillm::cpu
