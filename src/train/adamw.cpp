// Fused AdamW and gradient clipping over flat arenas, through the optimizer ops (they run on the
// arena's device).
#include "train/adamw.h"

#include <cmath>
#include <vector>

#include "ops/optimizer.h"

namespace unillm::train {

AdamW::AdamW(ParamArena& arena, const AdamWConfig& c)
    : Optimizer(arena), c_(c),
      m_(Tensor::zeros({arena.numel()}, DType::f32, arena.param_tensor().device())),
      v_(Tensor::zeros({arena.numel()}, DType::f32, arena.param_tensor().device())) {}

void AdamW::step(double lr) {
  ++step_;
  const double bc1 = 1.0 - std::pow(c_.beta1, static_cast<double>(step_));
  const double bc2 = 1.0 - std::pow(c_.beta2, static_cast<double>(step_));
  ops::AdamWScalars s;
  s.sqrt_bc2 = static_cast<float>(std::sqrt(bc2));
  s.beta1 = static_cast<float>(c_.beta1);
  s.beta2 = static_cast<float>(c_.beta2);
  s.eps = static_cast<float>(c_.eps);
  const Tensor& p = arena_.param_tensor();
  const Tensor& g = arena_.grad_tensor();
  for (const auto& seg : arena_.segments()) {
    const double seg_lr = lr * seg.lr_scale;
    s.step_size = static_cast<float>(seg_lr / bc1);
    s.decay = seg.decay ? static_cast<float>(1.0 - seg_lr * c_.weight_decay) : 1.0f;
    const int64_t b = seg.offset, e = seg.offset + seg.numel;
    ops::adamw_update(p.slice(0, b, e), g.slice(0, b, e), m_.slice(0, b, e), v_.slice(0, b, e), s);
  }
}

double clip_grad_norm(ParamArena& arena, double max_norm) {
  const Tensor& g = arena.grad_tensor();
  const double norm = std::sqrt(ops::sum_squares(g));  // fixed chunks: the same for any thread count
  if (max_norm > 0) {
    const double coef = max_norm / (norm + 1e-6);
    if (coef < 1.0) ops::scale_(g, static_cast<float>(coef));
  }
  return norm;
}

}  // namespace unillm::train
