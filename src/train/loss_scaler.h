// Dynamic loss scaling for fp16 training, with torch.cuda.amp.GradScaler's rule (HF Trainer's
// fp16): the loss gradient is multiplied by `scale` before backward; afterwards the gradients
// are divided by it and checked; a step whose gradients hold inf/NaN is skipped and the scale
// halves; after `growth_interval` good steps in a row it doubles.
//
// unillm keeps gradients in f32 (only saved activations are f16), so overflow is rare; the scaler
// is there so an fp16 config behaves as it does under HF, skips included.
#pragma once

#include <cstdint>

#include "train/arena.h"

namespace unillm::train {

struct LossScaler {
  double scale = 65536.0;  // GradScaler's init_scale (2^16)
  int64_t growth_tracker = 0;  // good steps since the last change
  double growth_factor = 2.0, backoff_factor = 0.5;
  int64_t growth_interval = 2000;

  // Divides the arena's gradients by scale; returns false when any of them is inf or NaN.
  bool unscale(ParamArena& arena) const;
  // After a step: backoff on overflow, growth after growth_interval clean steps.
  void update(bool found_inf);
};

}  // namespace unillm::train
