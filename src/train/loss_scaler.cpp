// GradScaler's unscale and update (see loss_scaler.h).
#include "train/loss_scaler.h"

#include <atomic>
#include <cmath>

#include "core/parallel.h"

namespace unillm::train {

bool LossScaler::unscale(ParamArena& arena) const {
  float* g = arena.grads();
  const float inv = static_cast<float>(1.0 / scale);  // GradScaler multiplies by the f32 reciprocal
  std::atomic<bool> bad{false};
  parallel_for(arena.numel(), 1 << 15, [&](int64_t b, int64_t e) {
    char found = 0;
    for (int64_t i = b; i < e; ++i) {
      g[i] *= inv;
      found |= !std::isfinite(g[i]);
    }
    if (found) bad.store(true, std::memory_order_relaxed);
  });
  return !bad.load();
}

void LossScaler::update(bool found_inf) {
  if (found_inf) {
    scale *= backoff_factor;
    growth_tracker = 0;
    return;
  }
  if (++growth_tracker == growth_interval) {
    scale *= growth_factor;
    growth_tracker = 0;
  }
}

}  // namespace unillm::train
