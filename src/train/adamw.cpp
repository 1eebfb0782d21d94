// Fused AdamW and gradient clipping over flat arenas (parallel, static split).
#include "train/adamw.h"

#include <cmath>
#include <vector>

#include "core/parallel.h"

namespace unillm::train {

AdamW::AdamW(ParamArena& arena, const AdamWConfig& c)
    : arena_(arena), c_(c), m_(Tensor::zeros({arena.numel()}, DType::f32)), v_(Tensor::zeros({arena.numel()}, DType::f32)) {}

void AdamW::step(double lr) {
  ++step_;
  const double bc1 = 1.0 - std::pow(c_.beta1, static_cast<double>(step_));
  const double bc2 = 1.0 - std::pow(c_.beta2, static_cast<double>(step_));
  const float step_size = static_cast<float>(lr / bc1);
  const float sqrt_bc2 = static_cast<float>(std::sqrt(bc2));
  const float b1 = static_cast<float>(c_.beta1), b2 = static_cast<float>(c_.beta2);
  const float eps = static_cast<float>(c_.eps);
  float* p = arena_.params();
  const float* g = arena_.grads();
  float* m = m_.data<float>();
  float* v = v_.data<float>();
  for (const auto& seg : arena_.segments()) {
    const float decay = seg.decay ? static_cast<float>(1.0 - lr * c_.weight_decay) : 1.0f;
    parallel_for(seg.numel, 4096, [&](int64_t b, int64_t e) {
      // Locals, and restrict pointers: read through the closure (floats that the stores might
      // alias), the loop does not vectorise.
      const float dk = decay, s1 = b1, s2 = b2, lr_c = step_size, bc = sqrt_bc2, ep = eps;
      float* __restrict pp = p + seg.offset;
      float* __restrict mp = m + seg.offset;
      float* __restrict vp = v + seg.offset;
      const float* __restrict gp = g + seg.offset;
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
}

double clip_grad_norm(ParamArena& arena, double max_norm) {
  const int64_t n = arena.numel();
  float* g = arena.grads();
  // Fixed chunks independent of the thread count → the same sum for every thread count.
  const int64_t chunk = 1 << 16, chunks = (n + chunk - 1) / chunk;
  std::vector<double> partial(static_cast<size_t>(chunks), 0.0);
  parallel_for(chunks, 1, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) {
      double s = 0;
      for (int64_t i = c * chunk; i < std::min(n, (c + 1) * chunk); ++i) s += static_cast<double>(g[i]) * g[i];
      partial[c] = s;
    }
  });
  double total = 0;
  for (double s : partial) total += s;
  const double norm = std::sqrt(total);
  if (max_norm > 0) {
    const double coef = max_norm / (norm + 1e-6);
    if (coef < 1.0) {
      const float cf = static_cast<float>(coef);
      parallel_for(n, 1 << 14, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) g[i] *= cf;
      });
    }
  }
  return norm;
}

}  // namespace unillm::train
