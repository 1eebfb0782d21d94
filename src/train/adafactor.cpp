// Adafactor's step per HF-named tensor, in f32 as transformers does (means and norms summed in
// double, so the order of the sums does not matter at f32 precision).
#include "train/adafactor.h"

#include <algorithm>
#include <cmath>

namespace unillm::train {

namespace {

constexpr float kEps1 = 1e-30f;  // eps[0]: added to g² (eps[1] only matters with scale_parameter)
constexpr double kDecayRate = -0.8;
constexpr double kClipThreshold = 1.0;

}  // namespace

Adafactor::Adafactor(ParamArena& arena, double weight_decay)
    : Optimizer(arena), weight_decay_(weight_decay) {
  int64_t rows = 0, cols = 0, vec = 0;
  for (const ArenaPart& p : arena_parts(arena)) {
    Slot s{p, p.matrix ? rows : vec, cols};
    if (p.matrix) {
      rows += p.rows;
      cols += p.cols;
    } else {
      vec += p.numel();
    }
    slots_.push_back(s);
  }
  row_ = Tensor::zeros({rows}, DType::f32);
  col_ = Tensor::zeros({cols}, DType::f32);
  sq_ = Tensor::zeros({vec}, DType::f32);
}

StateTensors Adafactor::state() {
  StateTensors out;
  if (row_.numel() > 0) out.push_back({"exp_avg_sq_row", &row_});
  if (col_.numel() > 0) out.push_back({"exp_avg_sq_col", &col_});
  if (sq_.numel() > 0) out.push_back({"exp_avg_sq", &sq_});
  return out;
}

// row = β·row + (1−β)·mean_j(g² + eps), col likewise over i; then
// upd_ij = g_ij / sqrt(row_i / mean(row)) / sqrt(col_j).
void Adafactor::update_matrix(const Slot& s, const float* g, float beta2t, float* upd) {
  const int64_t R = s.part.rows, C = s.part.cols;
  float* row = row_.data<float>() + s.state_offset;  // [R]
  float* col = col_.data<float>() + s.col_offset;    // [C]
  const float keep = beta2t, add = 1.0f - beta2t;
  std::vector<double> col_sum(static_cast<size_t>(C), 0.0);
  for (int64_t i = 0; i < R; ++i) {
    double rs = 0;
    for (int64_t j = 0; j < C; ++j) {
      const float u = g[i * C + j] * g[i * C + j] + kEps1;
      rs += u;
      col_sum[j] += u;
    }
    row[i] = row[i] * keep + add * static_cast<float>(rs / static_cast<double>(C));
  }
  for (int64_t j = 0; j < C; ++j)
    col[j] = col[j] * keep + add * static_cast<float>(col_sum[j] / static_cast<double>(R));
  double row_mean = 0;
  for (int64_t i = 0; i < R; ++i) row_mean += row[i];
  const auto mean = static_cast<float>(row_mean / static_cast<double>(R));
  for (int64_t i = 0; i < R; ++i) {
    const float r = 1.0f / std::sqrt(row[i] / mean);
    for (int64_t j = 0; j < C; ++j) upd[i * C + j] = r * (1.0f / std::sqrt(col[j])) * g[i * C + j];
  }
}

void Adafactor::update_vector(const Slot& s, const float* g, float beta2t, float* upd) {
  float* sq = sq_.data<float>() + s.state_offset;
  const float keep = beta2t, add = 1.0f - beta2t;
  for (int64_t i = 0; i < s.part.numel(); ++i) {
    sq[i] = sq[i] * keep + add * (g[i] * g[i] + kEps1);
    upd[i] = (1.0f / std::sqrt(sq[i])) * g[i];
  }
}

void Adafactor::step(double lr) {
  ++step_;
  const auto beta2t = static_cast<float>(1.0 - std::pow(static_cast<double>(step_), kDecayRate));
  HostArena h(arena_);
  float* params = h.params();
  const float* grads = h.grads();
  std::vector<float> upd;
#pragma omp parallel for schedule(dynamic, 1) private(upd)
  for (size_t k = 0; k < slots_.size(); ++k) {  // parts are independent: their own state and params
    const Slot& s = slots_[k];
    const int64_t n = s.part.numel();
    upd.resize(static_cast<size_t>(n));
    const float* g = grads + s.part.offset;
    if (s.part.matrix)
      update_matrix(s, g, beta2t, upd.data());
    else
      update_vector(s, g, beta2t, upd.data());
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(upd[i]) * upd[i];
    // update /= max(rms(update) / clip_threshold, 1); update *= lr
    const double rms = std::sqrt(ss / static_cast<double>(n));
    const auto denom = static_cast<float>(std::max(rms / kClipThreshold, 1.0));
    const double seg_lr = lr * s.part.seg->lr_scale;
    const auto lr_f = static_cast<float>(seg_lr);
    const double wd = s.part.seg->decay ? weight_decay_ : 0.0;
    const auto wd_f = static_cast<float>(-wd * seg_lr);
    float* p = params + s.part.offset;
    for (int64_t i = 0; i < n; ++i) {
      const float u = upd[i] / denom * lr_f;
      if (wd != 0) p[i] += p[i] * wd_f;
      p[i] -= u;
    }
  }
  h.commit();
}

}  // namespace unillm::train
