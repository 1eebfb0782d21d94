// GaLore's step over the arena's HF-named parts, on the host (see galore.h).
#include "train/galore.h"

#include <cmath>
#include <sstream>

#include "core/error.h"

namespace unillm::train {

LowRankLayout low_rank_layout(const ParamArena& arena, const LowRankSettings& s, bool svd,
                              const char* what) {
  LowRankLayout l;
  std::vector<ArenaPart> parts = arena_parts(arena);
  for (size_t k = 0; k < parts.size(); ++k) {
    LowRankSlot slot;
    slot.part = parts[k];
    slot.part_index = static_cast<int64_t>(k);
    const ArenaSegment& seg = *parts[k].seg;
    // parts of one segment are consecutive: this part's index within its segment
    int64_t within = 0;
    for (size_t j = k; j > 0 && parts[j - 1].seg == parts[k].seg; --j) ++within;
    const std::string& name =
        within < static_cast<int64_t>(seg.part_names.size()) ? seg.part_names[within] : seg.name;
    slot.target = parts[k].matrix && is_low_rank_target(name, s);
    slot.state_offset = l.moments;
    if (slot.target) {
      slot.shape = projection_shape(s.proj_type, parts[k].rows, parts[k].cols, s.rank, svd);
      slot.left_offset = l.left;
      slot.right_offset = l.right;
      slot.target_index = l.targets++;
      l.left += slot.shape.left_size();
      l.right += slot.shape.right_size();
      l.moments += slot.shape.low_size();
    } else {
      l.moments += parts[k].numel();
    }
    l.slots.push_back(slot);
  }
  if (l.targets == 0) {
    std::string t;
    for (const auto& x : s.target) t += (t.empty() ? "" : ",") + x;
    UNILLM_THROW(ConfigError, "[optim] ", what, " '", t,
                 "' matches no trainable linear weight (names such as q_proj, down_proj, or all)");
  }
  return l;
}

std::string describe_low_rank(const char* name, const LowRankLayout& l, const LowRankSettings& s) {
  std::ostringstream o;
  o << name << ": rank " << s.rank << " (" << s.proj_type << "), refreshed every "
    << s.update_interval << " steps, scale " << s.scale << " on " << l.targets << " of "
    << l.slots.size() << " tensors (the rest: AdamW)";
  if (s.layerwise) o << "; layerwise: the same update at the optimizer step";
  return o.str();
}

void Galore::attach(const std::vector<nn::Module*>& modules,
                    const std::function<void(const std::string&)>& say) {
  (void)modules;
  say(describe_low_rank("GaLore", layout_, c_.low_rank));
}

Galore::Galore(ParamArena& arena, const OptimizerConfig& c)
    : Optimizer(arena), c_(c), layout_(low_rank_layout(arena, c.low_rank, true, "galore_target")) {
  m_ = Tensor::zeros({layout_.moments}, DType::f32);
  v_ = Tensor::zeros({layout_.moments}, DType::f32);
  left_ = Tensor::zeros({layout_.left}, DType::f32);
  right_ = Tensor::zeros({layout_.right}, DType::f32);
}

StateTensors Galore::state() {
  StateTensors out{{"exp_avg", &m_}, {"exp_avg_sq", &v_}};
  if (left_.numel() > 0) out.push_back({"proj_left", &left_});
  if (right_.numel() > 0) out.push_back({"proj_right", &right_});
  return out;
}

// Refreshes the bases when the step count (before this step) is a multiple of the interval, as
// GaLoreProjector.project(grad, state["step"]) does; the first step always computes them.
void Galore::step_target(const LowRankSlot& s, float* p, const float* g, const AdamScalars& k) {
  float* left = left_.data<float>() + s.left_offset;
  float* right = right_.data<float>() + s.right_offset;
  if (step_ % c_.low_rank.update_interval == 0) svd_basis(g, s.shape, left, right);
  const int64_t n = s.shape.low_size();
  std::vector<float> low(static_cast<size_t>(n));
  project(g, s.shape, left, right, low.data());
  float* m = m_.data<float>() + s.state_offset;
  float* v = v_.data<float>() + s.state_offset;
  const float one_b1 = 1.0f - k.beta1, one_b2 = 1.0f - k.beta2;
  for (int64_t i = 0; i < n; ++i) {
    m[i] = m[i] * k.beta1 + one_b1 * low[i];
    v[i] = v[i] * k.beta2 + one_b2 * low[i] * low[i];
    low[i] = m[i] / (std::sqrt(v[i]) + k.eps);  // the normalised update, still low-rank
  }
  const int64_t full = s.part.numel();
  std::vector<float> upd(static_cast<size_t>(full));
  project_back(low.data(), s.shape, left, right, static_cast<float>(c_.low_rank.scale), upd.data());
  for (int64_t i = 0; i < full; ++i) {
    p[i] -= k.step_size * upd[i];
    if (k.decay != 0) p[i] -= k.decay * p[i];
  }
}

void low_rank_step(ParamArena& arena, const LowRankLayout& layout, const OptimizerConfig& c, int64_t step,
                   double lr, Tensor& m, Tensor& v, const LowRankTargetStep& target) {
  const double t = static_cast<double>(step + 1);
  const double bc1 = 1.0 - std::pow(c.beta1, t), bc2 = 1.0 - std::pow(c.beta2, t);
  HostArena h(arena);
  float* params = h.params();
  const float* grads = h.grads();
  for (const LowRankSlot& s : layout.slots) {
    const double seg_lr = lr * s.part.seg->lr_scale;
    AdamScalars k;
    k.beta1 = static_cast<float>(c.beta1);
    k.beta2 = static_cast<float>(c.beta2);
    k.eps = static_cast<float>(c.eps);
    k.step_size = static_cast<float>(seg_lr * std::sqrt(bc2) / bc1);
    // LLaMA-Factory: targets are in the weight-decay group; the rest by HF's decay names.
    k.decay = (s.target || s.part.seg->decay) ? static_cast<float>(seg_lr * c.weight_decay) : 0.0f;
    float* p = params + s.part.offset;
    const float* g = grads + s.part.offset;
    if (s.target)
      target(s, p, g, k);
    else
      adam_full_rank_step(p, g, m.data<float>() + s.state_offset, v.data<float>() + s.state_offset,
                          s.part.numel(), k);
  }
  h.commit();
}

void Galore::step(double lr) {
  low_rank_step(arena_, layout_, c_, step_, lr, m_, v_,
                [this](const LowRankSlot& s, float* p, const float* g, const AdamScalars& k) { step_target(s, p, g, k); });
  ++step_;
}

int64_t planned_low_rank_state_bytes(int64_t trainable) { return 2 * 4 * trainable; }

}  // namespace unillm::train
