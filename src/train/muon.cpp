// Muon's step: Newton–Schulz orthogonalised momentum for hidden matrices (their products through
// ops::linear, so they run on the CPU's GEMM), LLaMA-Factory's AdamW for the rest.
#include "train/muon.h"

#include <algorithm>
#include <cmath>

#include "autograd/grad_mode.h"
#include "core/dtype.h"
#include "ops/linear.h"

namespace unillm::train {

namespace {

constexpr float kA = 3.4445f, kB = -4.7750f, kC = 2.0315f;

using Mat = std::vector<float>;  // row-major

void round_all(Mat& x) {
  for (float& v : x) v = round_bf16(v);
}

// [m, k] × [n, k]ᵀ → [m, n] with f32 accumulation, rounded to bf16.
Mat mul_nt(const Mat& x, const Mat& w, int64_t m, int64_t k, int64_t n) {
  autograd::NoGradGuard no_grad;
  const Tensor y = ops::linear(Tensor::from_vector(x, {m, k}), Tensor::from_vector(w, {n, k}));
  const float* yv = y.data<float>();
  Mat out(yv, yv + m * n);
  round_all(out);
  return out;
}

Mat transposed(const Mat& x, int64_t rows, int64_t cols) {
  Mat t(x.size());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) t[j * rows + i] = x[i * cols + j];
  return t;
}

}  // namespace

float round_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

bool muon_takes(const std::string& hf_name, bool matrix) {
  return matrix && hf_name.find("embed") == std::string::npos &&
         hf_name.find("lm_head") == std::string::npos;
}

std::vector<float> newton_schulz5(const float* g, int64_t rows, int64_t cols, int steps) {
  const bool tall = rows > cols;
  const int64_t r = tall ? cols : rows, c = tall ? rows : cols;  // X is [r, c], r ≤ c
  Mat x(g, g + rows * cols);
  round_all(x);
  if (tall) x = transposed(x, rows, cols);
  double ss = 0;  // torch's bf16 norm: summed wide, the result rounded to bf16
  for (float v : x) ss += static_cast<double>(v) * v;
  const float denom = round_bf16(round_bf16(static_cast<float>(std::sqrt(ss))) + 1e-7f);
  for (float& v : x) v = round_bf16(v / denom);
  for (int s = 0; s < steps; ++s) {
    const Mat a = mul_nt(x, x, r, c, r);  // [r, r] XXᵀ
    Mat ca(a.size()), bm(a.size());
    for (size_t i = 0; i < a.size(); ++i) ca[i] = round_bf16(kC * a[i]);
    const Mat caa = mul_nt(ca, transposed(a, r, r), r, r, r);  // (cA)·A
    for (size_t i = 0; i < a.size(); ++i) bm[i] = round_bf16(round_bf16(kB * a[i]) + caa[i]);
    const Mat bx = mul_nt(bm, transposed(x, r, c), r, r, c);  // [r, c] B·X
    for (size_t i = 0; i < x.size(); ++i) x[i] = round_bf16(round_bf16(kA * x[i]) + bx[i]);
  }
  return tall ? transposed(x, r, c) : x;
}

Muon::Muon(ParamArena& arena, const AdamWConfig& c) : Optimizer(arena), c_(c) {
  int64_t nm = 0, na = 0;
  for (const ArenaPart& p : arena_parts(arena)) {
    Slot s{p, muon_takes(p.seg->name, p.matrix), 0};
    s.state_offset = s.muon ? nm : na;
    (s.muon ? nm : na) += p.numel();
    slots_.push_back(s);
  }
  buf_ = Tensor::zeros({nm}, DType::f32);
  m1_ = Tensor::zeros({na}, DType::f32);
  m2_ = Tensor::zeros({na}, DType::f32);
}

StateTensors Muon::state() {
  StateTensors out;
  if (buf_.numel() > 0) out.push_back({"momentum_buffer", &buf_});
  if (m1_.numel() > 0) {
    out.push_back({"moment1", &m1_});
    out.push_back({"moment2", &m2_});
  }
  return out;
}

// buf = μ·buf + g; u = NS5(g + μ·buf); p ← p·(1 − lr·wd) − lr·0.2·√max(R, C)·u.
void Muon::step_muon(const Slot& s, float* p, const float* g, double lr) {
  const int64_t n = s.part.numel();
  float* buf = buf_.data<float>() + s.state_offset;
  const auto mu = static_cast<float>(kMomentum);
  Mat nesterov(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    buf[i] = buf[i] * mu + g[i];
    nesterov[i] = g[i] + mu * buf[i];
  }
  const Mat u = newton_schulz5(nesterov.data(), s.part.rows, s.part.cols, kNsSteps);
  const double adjusted =
      lr * 0.2 * std::sqrt(static_cast<double>(std::max(s.part.rows, s.part.cols)));
  const auto keep = static_cast<float>(1.0 - lr * c_.weight_decay);
  const auto alpha = static_cast<float>(-adjusted);
  for (int64_t i = 0; i < n; ++i) {
    p[i] *= keep;
    p[i] += alpha * u[i];
  }
}

// LLaMA-Factory's AdamW: m, v by lerp; p ← p·(1 − lr·wd) − lr·√bc2/bc1 · m / (eps + √v).
void Muon::step_adamw(const Slot& s, float* p, const float* g, double lr) {
  float* m = m1_.data<float>() + s.state_offset;
  float* v = m2_.data<float>() + s.state_offset;
  const auto w1 = static_cast<float>(1.0 - c_.beta1), w2 = static_cast<float>(1.0 - c_.beta2);
  const auto eps = static_cast<float>(c_.eps);
  const auto st = static_cast<double>(step_);
  const double scale = (1.0 - std::pow(c_.beta1, st)) / std::sqrt(1.0 - std::pow(c_.beta2, st));
  const auto keep = static_cast<float>(1.0 - lr * c_.weight_decay);
  const auto alpha = static_cast<float>(-lr / scale);
  for (int64_t i = 0; i < s.part.numel(); ++i) {
    m[i] += w1 * (g[i] - m[i]);  // torch's lerp for weight < 0.5
    v[i] += w2 * (g[i] * g[i] - v[i]);
    p[i] *= keep;
    p[i] += alpha * (m[i] / (eps + std::sqrt(v[i])));
  }
}

void Muon::step(double lr) {
  ++step_;
  HostArena h(arena_);
  float* params = h.params();
  const float* grads = h.grads();
  for (const Slot& s : slots_) {  // Muon's products are threaded inside; AdamW's loops are cheap
    const double seg_lr = lr * s.part.seg->lr_scale;
    float* p = params + s.part.offset;
    const float* g = grads + s.part.offset;
    if (s.muon)
      step_muon(s, p, g, seg_lr);
    else
      step_adamw(s, p, g, seg_lr);
  }
  h.commit();
}

}  // namespace unillm::train
