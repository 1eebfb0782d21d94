// CPU kernels of the optimizer ops (ops/optimizer.h): AdamW, chunked sums of squares, scaling.
// Compiled with -fno-math-errno -ftree-vectorize (CMakeLists.txt): the AdamW loop then vectorises
// to sqrtps/divps, correctly rounded like their scalar forms, so updates are bit-identical to the
// scalar loop (no FMA at the baseline ISA, so no contraction either).
#include "ops/optimizer.h"

#include <algorithm>
#include <cmath>

#include "backends/cpu/kernels/register_kernels.h"
#include "backends/cpu/simd/simd.h"
#include "core/parallel.h"
#include "core/registry.h"

namespace unillm::cpu {

namespace {

void adamw(const ops::AdamWArgs& a) {
  parallel_for(a.n, 4096, [&](int64_t b, int64_t e) {
    // Locals and restrict pointers: read through the closure (floats that the stores might
    // alias), the loop does not vectorise.
    const float dk = a.s.decay, s1 = a.s.beta1, s2 = a.s.beta2, lr_c = a.s.step_size;
    const float bc = a.s.sqrt_bc2, ep = a.s.eps;
    float* __restrict pp = a.p;
    float* __restrict mp = a.m;
    float* __restrict vp = a.v;
    const float* __restrict gp = a.g;
    for (int64_t i = b; i < e; ++i) {
      float pi = pp[i] * dk;
      float mi = s1 * mp[i] + (1.0f - s1) * gp[i];
      float vi = s2 * vp[i] + (1.0f - s2) * gp[i] * gp[i];
      mp[i] = mi;
      vp[i] = vi;
      pp[i] = pi - lr_c * mi / (std::sqrt(vi) / bc + ep);
    }
  });
}

void sum_squares(const ops::SumSquaresArgs& a) {
  const int64_t chunks = (a.n + a.chunk - 1) / a.chunk;
  parallel_for(chunks, 1, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) {
      double s = 0;
      for (int64_t i = c * a.chunk; i < std::min(a.n, (c + 1) * a.chunk); ++i)
        s += static_cast<double>(a.x[i]) * a.x[i];
      a.partials[c] = s;
    }
  });
}

void scale(const ops::ScaleArgs& a) {
  parallel_for(a.n, 1 << 14, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) a.x[i] *= a.factor;
  });
}

}  // namespace

void register_optimizer() {
  auto& reg = kernel_registry();
  reg.add<ops::AdamWKernel>("adamw", DeviceKind::cpu, DType::f32, &adamw, "", kPortable);
  reg.add<ops::SumSquaresKernel>("sum_squares", DeviceKind::cpu, DType::f32, &sum_squares, "",
                                 kPortable);
  reg.add<ops::ScaleKernel>("scale", DeviceKind::cpu, DType::f32, &scale, "", kPortable);
}

}  // namespace unillm::cpu
