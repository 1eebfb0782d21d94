// vocab_parallel_cross_entropy: row chunks of logits through strided GEMMs (ops::strided_gemm, the
// "lora_gemm" kernel: BLAS on the CPU), the per-row statistics on the host combined over the
// group by the caller's reduce, one exp per logit kept for the eager gradients, and dx / dW
// through the same GEMMs with transposed operands (no copies).
#include "ops/vocab_parallel_cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "ops/dispatch.h"
#include "ops/lora_linear.h"

namespace unillm::ops {

CrossEntropyResult vocab_parallel_cross_entropy(const Tensor& x_in, const Tensor& w_in, const Tensor& labels_in,
                                                int64_t vocab_begin, int64_t vocab, const GroupReduce& reduce,
                                                double grad_scale, int64_t value_begin, int64_t value_end) {
  constexpr const char* kOp = "vocab_parallel_cross_entropy";
  check_defined(kOp, "x", x_in);
  check_defined(kOp, "w", w_in);
  check_ndim(kOp, "x", x_in, 2);
  check_ndim(kOp, "w", w_in, 2);
  check_dtype(kOp, "x", x_in, DType::f32);
  check_dtype(kOp, "labels", labels_in, DType::i32);
  const Tensor x = x_in.contiguous(), w = w_in.contiguous(), labels = labels_in.contiguous();
  const int64_t n = x.size(0), c = x.size(1), vr = w.size(0);
  if (w.size(1) != c || labels.numel() != n)
    UNILLM_THROW(ShapeError, "[", kOp, "] x ", shape_str(x.shape()), ", w ", shape_str(w.shape()), ", labels ",
                 shape_str(labels.shape()));
  if (!x.device().is_cpu()) UNILLM_THROW(DeviceError, "[", kOp, "] is implemented on the CPU only");
  if (value_end < 0) value_end = n;
  const int32_t* lab = labels.data<int32_t>();
  for (int64_t i = 0; i < n; ++i)
    if (lab[i] != kIgnoreIndex && (lab[i] < 0 || lab[i] >= vocab))
      UNILLM_THROW(ShapeError, "[", kOp, "] label ", lab[i], " at row ", i, " is outside [0, ", vocab, ")");
  const bool grads = autograd::needs_grad({x_in, w_in});
  const double assumed = grad_scale != 0 ? grad_scale : 1.0;
  autograd::NoGradGuard no_grad;
  const Tensor w32 = w.to(DType::f32);  // the GEMMs' operand (a copy only for bf16/f16 weights)
  Tensor dx = grads ? Tensor::zeros({n, c}, DType::f32) : Tensor();
  Tensor dw = grads ? Tensor::zeros({vr, c}, DType::f32) : Tensor();
  const int64_t chunk = std::max<int64_t>(1, cross_entropy_auto_chunk(std::max<int64_t>(vr, 1), DType::f32));
  Tensor logits = Tensor::empty({std::min(n, chunk), vr}, DType::f32);
  float* l = logits.data<float>();
  double loss = 0;
  int64_t count = 0;
  for (int64_t r0 = 0; r0 < n; r0 += chunk) {
    const int64_t r1 = std::min(n, r0 + chunk), m = r1 - r0;
    // logits [m, V_r] = x rows · W_rᵀ
    strided_gemm({static_cast<const float*>(x.data<float>()) + r0 * c, w32.raw_data(), l, m, vr, c, c, c, vr, false,
                  true, 1.0, 0.0, DType::f32},
                 x, w32, logits);
    // Per row: the max over the group; then e = exp(logit − local max), kept for the gradient, and
    // Σ e·exp(local max − max) with the target logit (the one rank holding the label adds it),
    // summed over the group in one call.
    std::vector<double> local(static_cast<size_t>(m), -std::numeric_limits<double>::infinity());
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < vr; ++j) local[i] = std::max(local[i], static_cast<double>(l[i * vr + j]));
    std::vector<double> mx = local;
    reduce(mx, true);
    std::vector<double> sums(static_cast<size_t>(2 * m), 0.0);
    for (int64_t i = 0; i < m; ++i) {
      const int64_t t = lab[r0 + i] - vocab_begin;
      if (lab[r0 + i] != kIgnoreIndex && t >= 0 && t < vr) sums[m + i] = l[i * vr + t];
      const auto lm = static_cast<float>(local[i]);
      double s = 0;
      for (int64_t j = 0; j < vr; ++j) s += (l[i * vr + j] = std::exp(l[i * vr + j] - lm));
      sums[i] = vr > 0 ? s * std::exp(local[i] - mx[i]) : 0.0;
    }
    reduce(sums, false);
    for (int64_t i = 0; i < m; ++i) {
      const int64_t row = r0 + i;
      const bool scored = lab[row] != kIgnoreIndex;
      const double lse = mx[i] + std::log(sums[i]);
      if (scored && row >= value_begin && row < value_end) {
        loss += lse - sums[m + i];
        ++count;
      }
      if (!grads) continue;
      // dlogits = assumed · (softmax − onehot), softmax = e · exp(local max − lse); ignored rows none.
      const auto f = static_cast<float>(scored ? assumed * std::exp(local[i] - lse) : 0.0);
      for (int64_t j = 0; j < vr; ++j) l[i * vr + j] *= f;
      const int64_t t = lab[row] - vocab_begin;
      if (scored && t >= 0 && t < vr) l[i * vr + t] -= static_cast<float>(assumed);
    }
    if (!grads) continue;
    // dx rows = dlogits · W_r; dW_r += dlogitsᵀ · x rows.
    strided_gemm({l, w32.raw_data(), dx.data<float>() + r0 * c, m, c, vr, vr, c, c, false, false, 1.0, 0.0,
                  DType::f32},
                 logits, w32, dx);
    strided_gemm({l, x.data<float>() + r0 * c, dw.raw_data(), vr, c, m, vr, c, c, true, false, 1.0, 1.0, DType::f32},
                 logits, x, dw);
  }
  CrossEntropyResult r;
  r.loss_sum = Tensor::from_vector({static_cast<float>(loss)}, {});
  r.count = count;
  if (grads) {
    autograd::GradModeGuard on(true);
    autograd::record(eager_grad_node(dx, dw, assumed), {x_in, w_in, labels_in}, {&r.loss_sum});
  }
  return r;
}

}  // namespace unillm::ops
