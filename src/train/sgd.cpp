// Plain SGD over the arena, in f32 as torch's d_p = g + wd·p; p += −lr·d_p.
#include "train/sgd.h"

namespace unillm::train {

void Sgd::step(double lr) {
  ++step_;
  HostArena h(arena_);
  float* p = h.params();
  const float* g = h.grads();
  for (const auto& seg : arena_.segments()) {
    const auto wd = static_cast<float>(seg.decay ? weight_decay_ : 0.0);
    const auto neg_lr = static_cast<float>(-lr * seg.lr_scale);
    const int64_t e = seg.offset + seg.numel;
#pragma omp parallel for schedule(static)
    for (int64_t i = seg.offset; i < e; ++i) {
      const float d = wd != 0.0f ? g[i] + wd * p[i] : g[i];
      p[i] += neg_lr * d;
    }
  }
  h.commit();
}

}  // namespace unillm::train
