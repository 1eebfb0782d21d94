// The 8-bit AdamW step (bitsandbytes' blockwise kernel semantics) and its dynamic maps.
#include "train/adamw_8bit.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace unillm::train {

namespace {

// torch.linspace in f32 (its scalar CPU path: the first half up from start, the rest down from
// end).
std::vector<float> linspace_f32(float start, float end, int64_t steps) {
  std::vector<float> v(static_cast<size_t>(steps));
  const float step = (end - start) / static_cast<float>(steps - 1);
  for (int64_t i = 0; i < steps; ++i)
    v[i] = i < steps / 2 ? start + step * static_cast<float>(i)
                         : end - step * static_cast<float>(steps - i - 1);
  return v;
}

// For exponent i (0..6): midpoints of linspace(0.1, 1, n_i) times 10^(i − 6), n_i = 2^i + 1
// signed (with both signs) or 2^(i+1) + 1 unsigned; then 0 and 1.
std::array<float, 256> make_map(bool is_signed) {
  std::vector<float> data;
  for (int i = 0; i < 7; ++i) {
    const int64_t n = (int64_t{1} << (is_signed ? i : i + 1)) + 1;
    const std::vector<float> b = linspace_f32(0.1f, 1.0f, n);
    const auto scale = static_cast<float>(std::pow(10.0, -6 + i));
    for (size_t j = 0; j + 1 < b.size(); ++j) {
      const float mean = (b[j] + b[j + 1]) / 2.0f;
      data.push_back(scale * mean);
      if (is_signed) data.push_back(-scale * mean);
    }
  }
  data.push_back(0.0f);
  data.push_back(1.0f);
  UNILLM_CHECK(data.size() == 256, "[optim] dynamic map has ", data.size(), " values");
  std::sort(data.begin(), data.end());
  std::array<float, 256> out{};
  std::copy(data.begin(), data.end(), out.begin());
  return out;
}

}  // namespace

const std::array<float, 256>& bnb_dynamic_map(bool is_signed) {
  static const std::array<float, 256> s = make_map(true), u = make_map(false);
  return is_signed ? s : u;
}

int nearest_code(const std::array<float, 256>& map, float x) {
  const auto hi = static_cast<int>(std::lower_bound(map.begin(), map.end(), x) - map.begin());
  if (hi == 0) return 0;
  if (hi == 256) return 255;
  return std::fabs(x - map[hi - 1]) <= std::fabs(map[hi] - x) ? hi - 1 : hi;
}

struct AdamW8bit::StepScalars {
  float beta1, beta2, eps, correction2, step_size, lr, wd;
};

AdamW8bit::AdamW8bit(ParamArena& arena, const AdamWConfig& c) : Optimizer(arena), c_(c) {
  int64_t n8 = 0, blocks = 0, n32 = 0;
  for (const ArenaPart& p : arena_parts(arena)) {
    Slot s{p, p.numel() >= kMin8bitSize, 0, 0};
    if (s.q8) {
      s.state_offset = n8;
      s.block_offset = blocks;
      n8 += p.numel();
      blocks += (p.numel() + kBlock - 1) / kBlock;
    } else {
      s.state_offset = n32;
      n32 += p.numel();
    }
    slots_.push_back(s);
  }
  // Zero codes with zero absmaxes dequantise to 0, as bnb's zero-initialised state.
  codes1_ = Tensor::zeros({n8}, DType::i8);
  codes2_ = Tensor::zeros({n8}, DType::i8);
  absmax1_ = Tensor::zeros({blocks}, DType::f32);
  absmax2_ = Tensor::zeros({blocks}, DType::f32);
  m32_ = Tensor::zeros({n32}, DType::f32);
  v32_ = Tensor::zeros({n32}, DType::f32);
}

StateTensors AdamW8bit::state() {
  StateTensors out;
  if (codes1_.numel() > 0) {
    out.push_back({"exp_avg_codes", &codes1_});
    out.push_back({"exp_avg_absmax", &absmax1_});
    out.push_back({"exp_avg_sq_codes", &codes2_});
    out.push_back({"exp_avg_sq_absmax", &absmax2_});
  }
  if (m32_.numel() > 0) {
    out.push_back({"exp_avg", &m32_});
    out.push_back({"exp_avg_sq", &v32_});
  }
  return out;
}

void AdamW8bit::step_8bit(const Slot& s, float* p, const float* g, const StepScalars& k) {
  const auto& map1 = bnb_dynamic_map(true);
  const auto& map2 = bnb_dynamic_map(false);
  auto* c1 = reinterpret_cast<uint8_t*>(codes1_.raw_data()) + s.state_offset;
  auto* c2 = reinterpret_cast<uint8_t*>(codes2_.raw_data()) + s.state_offset;
  float* a1 = absmax1_.data<float>() + s.block_offset;
  float* a2 = absmax2_.data<float>() + s.block_offset;
  const int64_t n = s.part.numel();
  float m[kBlock], v[kBlock];
  for (int64_t b = 0; b * kBlock < n; ++b) {
    const int64_t i0 = b * kBlock, len = std::min(kBlock, n - i0);
    float max1 = 0, max2 = 0;
    for (int64_t j = 0; j < len; ++j) {
      const int64_t i = i0 + j;
      m[j] = map1[c1[i]] * a1[b] * k.beta1 + (1.0f - k.beta1) * g[i];
      v[j] = map2[c2[i]] * a2[b] * k.beta2 + (1.0f - k.beta2) * g[i] * g[i];
      max1 = std::max(max1, std::fabs(m[j]));
      max2 = std::max(max2, std::fabs(v[j]));
      p[i] = p[i] + k.step_size * (m[j] / (std::sqrt(v[j]) + k.correction2 * k.eps));
      if (k.wd > 0.0f) p[i] = p[i] * (1.0f - k.lr * k.wd);
    }
    a1[b] = max1;
    a2[b] = max2;
    for (int64_t j = 0; j < len; ++j) {
      c1[i0 + j] = static_cast<uint8_t>(nearest_code(map1, max1 > 0 ? m[j] / max1 : 0.0f));
      c2[i0 + j] = static_cast<uint8_t>(nearest_code(map2, max2 > 0 ? v[j] / max2 : 0.0f));
    }
  }
}

void AdamW8bit::step_32bit(const Slot& s, float* p, const float* g, const StepScalars& k) {
  float* m = m32_.data<float>() + s.state_offset;
  float* v = v32_.data<float>() + s.state_offset;
  for (int64_t i = 0; i < s.part.numel(); ++i) {
    m[i] = m[i] * k.beta1 + (1.0f - k.beta1) * g[i];
    v[i] = v[i] * k.beta2 + (1.0f - k.beta2) * g[i] * g[i];
    p[i] = p[i] + k.step_size * (m[i] / (std::sqrt(v[i]) + k.eps * k.correction2));
    if (k.wd > 0.0f) p[i] = p[i] * (1.0f - k.lr * k.wd);
  }
}

void AdamW8bit::step(double lr) {
  ++step_;
  const auto beta1 = static_cast<float>(c_.beta1), beta2 = static_cast<float>(c_.beta2);
  const auto st = static_cast<float>(step_);
  // bnb's scalars, in f32 as its kernels compute them.
  const float correction1 = 1.0f - std::pow(beta1, st);
  const float correction2 = std::sqrt(1.0f - std::pow(beta2, st));
  HostArena h(arena_);
  float* params = h.params();
  const float* grads = h.grads();
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t i = 0; i < slots_.size(); ++i) {  // parts are independent
    const Slot& s = slots_[i];
    const auto seg_lr = static_cast<float>(lr * s.part.seg->lr_scale);
    StepScalars k{beta1,
                  beta2,
                  static_cast<float>(c_.eps),
                  correction2,
                  -seg_lr * correction2 / correction1,
                  seg_lr,
                  s.part.seg->decay ? static_cast<float>(c_.weight_decay) : 0.0f};
    float* p = params + s.part.offset;
    const float* g = grads + s.part.offset;
    if (s.q8)
      step_8bit(s, p, g, k);
    else
      step_32bit(s, p, g, k);
  }
  h.commit();
}

std::vector<float> AdamW8bit::dequantized(bool second) const {
  std::vector<float> out(static_cast<size_t>(arena_.numel()), 0.0f);
  const auto& map = bnb_dynamic_map(!second);
  const auto* codes = reinterpret_cast<const uint8_t*>((second ? codes2_ : codes1_).raw_data());
  const float* absmax = (second ? absmax2_ : absmax1_).data<float>();
  const float* f32 = (second ? v32_ : m32_).data<float>();
  for (const Slot& s : slots_)
    for (int64_t i = 0; i < s.part.numel(); ++i)
      out[s.part.offset + i] =
          s.q8 ? map[codes[s.state_offset + i]] * absmax[s.block_offset + i / kBlock]
               : f32[s.state_offset + i];
  return out;
}

}  // namespace unillm::train
