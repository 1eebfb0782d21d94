// Adam-mini's partition by HF name and its step, in f32 as the adam-mini package computes it
// (block means summed in double, so their order does not matter at f32 precision).
#include "train/adam_mini.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "core/error.h"

namespace unillm::train {

namespace {

bool has_any(const std::string& n, std::initializer_list<const char*> keys) {
  return std::any_of(keys.begin(), keys.end(),
                     [&n](const char* k) { return n.find(k) != std::string::npos; });
}

}  // namespace

MiniBlocks adam_mini_blocks(const std::string& hf_name, int64_t rows, int64_t cols, bool matrix,
                            int64_t head_numel) {
  std::string n = hf_name;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char ch) { return std::tolower(ch); });
  MiniBlocks b;
  b.decay = !has_any(n, {"norm", "ln", "bias"});
  const int64_t numel = rows * cols;
  if (has_any(n, {"bias"})) {
    b.kind = MiniBlocks::kElement;
    b.block = 1;
  } else if (has_any(n, {"k_proj", "q_proj", "wq", "wk", "query", "key"})) {
    if (head_numel <= 0 || numel % head_numel != 0)
      UNILLM_THROW(ConfigError, "[optim] use_adam_mini: ", hf_name, " has ", numel,
                   " elements, not a multiple of one head's hidden_size²/num_attention_heads = ",
                   head_numel, " (adam-mini keeps q/k second moments per head)");
    b.kind = MiniBlocks::kHead;
    b.block = head_numel;
  } else if (has_any(n, {"embed", "embd", "wte", "lm_head", "output", "final_layer", "v_proj", "wv",
                         "value", "feed_forward", "linear", "mlp", "o_proj", "wo", "attn.proj"})) {
    if (!matrix)
      UNILLM_THROW(ConfigError, "[optim] use_adam_mini: ", hf_name,
                   " is 1-D but its name asks for one second moment per row of a matrix");
    b.kind = MiniBlocks::kRow;
    b.block = cols;
  } else {
    b.kind = MiniBlocks::kTensor;
    b.block = numel;
  }
  return b;
}

AdamMini::AdamMini(ParamArena& arena, const AdamMiniConfig& c) : Optimizer(arena), c_(c) {
  UNILLM_CHECK(c.hidden_size > 0 && c.num_heads > 0 && c.num_kv_heads > 0 &&
                   c.num_heads % c.num_kv_heads == 0,
               "[optim] use_adam_mini needs hidden_size, num_attention_heads and a divisor of it "
               "as num_key_value_heads (got ",
               c.hidden_size, ", ", c.num_heads, ", ", c.num_kv_heads, ")");
  const int64_t head_numel = c.hidden_size * c.hidden_size / c.num_heads;
  int64_t nv = 0;
  const ArenaSegment* seg = nullptr;
  size_t index = 0;  // the part's index within its segment
  for (const ArenaPart& p : arena_parts(arena)) {
    index = p.seg == seg ? index + 1 : 0;
    seg = p.seg;
    const std::string& name = index < seg->part_names.size() ? seg->part_names[index] : seg->name;
    Slot s{p, adam_mini_blocks(name, p.rows, p.cols, p.matrix, head_numel), nv};
    nv += p.numel() / s.blocks.block;
    slots_.push_back(s);
  }
  m_ = Tensor::zeros({arena.numel()}, DType::f32);
  v_ = Tensor::zeros({nv}, DType::f32);
}

// Per block: vmean = β2·vmean + (1−β2)·mean(g²); p ← p·(1 − lr·wd); m = lerp(m, g, 1−β1);
// h = √vmean/√bc2 + eps; p −= lr·m/(bc1·h). A bias's blocks are its elements (Adam's addcdiv).
void AdamMini::step_slot(const Slot& s, float* p, const float* g, double lr) {
  const auto st = static_cast<double>(step_);
  const double bc1 = 1.0 - std::pow(c_.adam.beta1, st);
  const auto bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(c_.adam.beta2, st)));
  const auto beta2 = static_cast<float>(c_.adam.beta2),
             w2 = static_cast<float>(1.0 - c_.adam.beta2);
  const auto w1 = static_cast<float>(1.0 - c_.adam.beta1), eps = static_cast<float>(c_.adam.eps);
  const bool decay = s.blocks.decay && c_.adam.weight_decay > 0.0;
  const auto keep = static_cast<float>(1.0 - lr * c_.adam.weight_decay);
  const auto lr_f = static_cast<float>(lr);
  const int64_t bs = s.blocks.block, nb = s.part.numel() / bs;
  float* m = m_.data<float>() + s.part.offset;
  float* v = v_.data<float>() + s.v_offset;
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t i0 = b * bs;
    double ss = 0;
    for (int64_t i = i0; i < i0 + bs; ++i) ss += static_cast<double>(g[i] * g[i]);
    const auto mean = static_cast<float>(ss / static_cast<double>(bs));
    v[b] = v[b] * beta2 + w2 * mean;
    const float h = std::sqrt(v[b]) / bc2_sqrt + eps;
    const auto stepsize = static_cast<float>(1.0 / bc1) / h;
    for (int64_t i = i0; i < i0 + bs; ++i) {
      if (decay) p[i] *= keep;
      m[i] += w1 * (g[i] - m[i]);  // torch's lerp for weight < 0.5
      p[i] -= s.blocks.kind == MiniBlocks::kElement ? static_cast<float>(lr / bc1) * (m[i] / h)
                                                    : m[i] * stepsize * lr_f;
    }
  }
}

void AdamMini::step(double lr) {
  ++step_;
  HostArena h(arena_);
  float* params = h.params();
  const float* grads = h.grads();
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t k = 0; k < slots_.size(); ++k) {  // parts are independent: their own state and params
    const Slot& s = slots_[k];
    step_slot(s, params + s.part.offset, grads + s.part.offset, lr * s.part.seg->lr_scale);
  }
  h.commit();
}

}  // namespace unillm::train
