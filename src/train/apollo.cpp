// APOLLO's step over the arena's HF-named parts, on the host (see apollo.h).
#include "train/apollo.h"

#include <algorithm>
#include <cmath>

namespace unillm::train {
namespace {

double sum_squares(const float* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

}  // namespace

Apollo::Apollo(ParamArena& arena, const OptimizerConfig& c)
    : Optimizer(arena),
      c_(c),
      layout_(low_rank_layout(arena, c.low_rank, c.low_rank.proj == "svd", "apollo_target")) {
  m_ = Tensor::zeros({layout_.moments}, DType::f32);
  v_ = Tensor::zeros({layout_.moments}, DType::f32);
  left_ = Tensor::zeros({layout_.left}, DType::f32);
  right_ = Tensor::zeros({layout_.right}, DType::f32);
  norms_ = Tensor::zeros({layout_.targets}, DType::f32);
  seeds_ = Tensor::zeros({layout_.targets}, DType::i64);
  // apollo_torch seeds each parameter with its 1-based index over the optimizer's groups, which
  // LLaMA-Factory orders no-decay, decay, then the targets (HF order, as the arena's parts): target
  // j gets (non-targets) + j + 1. Layerwise builds one optimizer per parameter: every seed is 1.
  const int64_t others = static_cast<int64_t>(layout_.slots.size()) - layout_.targets;
  for (const LowRankSlot& s : layout_.slots)
    if (s.target)
      seeds_.data<int64_t>()[s.target_index] =
          c.low_rank.layerwise ? 1 : others + s.target_index + 1;
}

void Apollo::attach(const std::vector<nn::Module*>& modules,
                    const std::function<void(const std::string&)>& say) {
  (void)modules;
  const LowRankSettings& s = c_.low_rank;
  say(describe_low_rank("APOLLO", layout_, s) + "; " + s.proj + " projection, " + s.scale_type +
      "-wise scaling" + (s.scale_front ? " (scale in front)" : ""));
}

StateTensors Apollo::state() {
  StateTensors out{{"exp_avg", &m_}, {"exp_avg_sq", &v_}};
  if (left_.numel() > 0) out.push_back({"proj_left", &left_});
  if (right_.numel() > 0) out.push_back({"proj_right", &right_});
  out.push_back({"proj_seed", &seeds_});
  out.push_back({"scaled_grad_norm", &norms_});
  return out;
}

// factor[c] = ‖upd‖ / (‖low‖ + 1e-8) per channel (rows of a right projection's [rows, r], columns
// of a left one's [r, cols]), or one factor for the tensor.
void Apollo::scale_factors(const LowRankSlot& s, const float* upd, const float* low,
                           std::vector<float>& factor) const {
  const int64_t R = s.shape.low_rows(), C = s.shape.low_cols();
  if (c_.low_rank.scale_type == "tensor") {
    const double n = std::sqrt(sum_squares(upd, R * C)), d = std::sqrt(sum_squares(low, R * C));
    factor.assign(1, static_cast<float>(n / (d + 1e-8)));
    return;
  }
  const bool per_row = s.shape.side == ProjSide::kRight;
  factor.assign(static_cast<size_t>(per_row ? R : C), 0.0f);
  std::vector<double> nu(factor.size(), 0.0), nl(factor.size(), 0.0);
  for (int64_t i = 0; i < R; ++i)
    for (int64_t j = 0; j < C; ++j) {
      const size_t c = static_cast<size_t>(per_row ? i : j);
      nu[c] += static_cast<double>(upd[i * C + j]) * upd[i * C + j];
      nl[c] += static_cast<double>(low[i * C + j]) * low[i * C + j];
    }
  for (size_t c = 0; c < factor.size(); ++c)
    factor[c] = static_cast<float>(std::sqrt(nu[c]) / (std::sqrt(nl[c]) + 1e-8));
}

void Apollo::step_target(const LowRankSlot& s, float* p, const float* g, const AdamScalars& k) {
  const LowRankSettings& o = c_.low_rank;
  float* left = left_.data<float>() + s.left_offset;
  float* right = right_.data<float>() + s.right_offset;
  if (step_ % o.update_interval == 0) {
    if (o.proj == "svd") {
      svd_basis(g, s.shape, left, right);
    } else {
      int64_t& seed = seeds_.data<int64_t>()[s.target_index];
      random_basis(s.shape, static_cast<uint64_t>(seed), left, right);
      seed = static_cast<int64_t>(next_projection_seed(static_cast<uint64_t>(seed)));
    }
  }
  const int64_t n = s.shape.low_size();
  std::vector<float> low(static_cast<size_t>(n)), upd(static_cast<size_t>(n));
  project(g, s.shape, left, right, low.data());
  float* m = m_.data<float>() + s.state_offset;
  float* v = v_.data<float>() + s.state_offset;
  const float one_b1 = 1.0f - k.beta1, one_b2 = 1.0f - k.beta2;
  for (int64_t i = 0; i < n; ++i) {
    m[i] = m[i] * k.beta1 + one_b1 * low[i];
    v[i] = v[i] * k.beta2 + one_b2 * low[i] * low[i];
    upd[i] = m[i] / (std::sqrt(v[i]) + k.eps);
  }
  std::vector<float> factor;
  scale_factors(s, upd.data(), low.data(), factor);
  const int64_t R = s.part.rows, C = s.part.cols;
  const bool per_row = s.shape.side == ProjSide::kRight;
  std::vector<float> scaled(static_cast<size_t>(R * C));
  for (int64_t i = 0; i < R; ++i)
    for (int64_t j = 0; j < C; ++j)
      scaled[i * C + j] = g[i * C + j] * factor[factor.size() == 1 ? 0 : (per_row ? i : j)];
  const auto root = static_cast<float>(std::sqrt(o.scale));
  if (o.scale_front)
    for (float& x : scaled) x *= root;
  // Fira's norm-growth limiter: the scaled gradient's norm grows at most 1.01× per step.
  float& prev = norms_.data<float>()[s.target_index];
  const auto norm = static_cast<float>(std::sqrt(sum_squares(scaled.data(), R * C)));
  if (step_ > 0) {
    const float limiter = std::max(norm / (prev + 1e-8f), 1.01f) / 1.01f;
    for (float& x : scaled) x /= limiter;
    prev = norm / limiter;
  } else {
    prev = norm;
  }
  if (!o.scale_front)
    for (float& x : scaled) x *= root;
  for (int64_t i = 0; i < R * C; ++i) {
    p[i] -= k.step_size * scaled[i];
    if (k.decay != 0) p[i] -= k.decay * p[i];
  }
}

void Apollo::step(double lr) {
  low_rank_step(arena_, layout_, c_, step_, lr, m_, v_,
                [this](const LowRankSlot& s, float* p, const float* g, const AdamScalars& k) { step_target(s, p, g, k); });
  ++step_;
}

}  // namespace unillm::train
