// label_smoothing_term beside linear_cross_entropy against Hugging Face's LabelSmoother computed
// naively in double from the full logits (its code: (1 − ε) · mean NLL + ε · mean over tokens and
// vocabulary of −log p; here summed over tokens), and its gradients against the softmax
// derivative p − (1 − ε) · onehot − ε / V.
#include "ops/label_smoothing.h"

#include <cmath>

#include "grad_check_util.h"
#include "ops/cross_entropy.h"
#include "ops/elementwise.h"

namespace unillm {
namespace {

class LabelSmoothingTest : public optest::OpTest {};

struct Oracle {
  double loss = 0;
  std::vector<double> dx, dw;
};

Oracle hf_label_smoother(const Tensor& x, const Tensor& w, const std::vector<int32_t>& labels, double eps, double g) {
  const std::vector<double> xv = optest::doubles(x), wv = optest::doubles(w);
  const size_t n = labels.size(), c = xv.size() / n, v = wv.size() / c;
  Oracle o;
  o.dx.assign(n * c, 0.0);
  o.dw.assign(v * c, 0.0);
  for (size_t i = 0; i < n; ++i) {
    if (labels[i] == -100) continue;
    std::vector<double> z(v, 0.0), logp(v);
    for (size_t j = 0; j < v; ++j)
      for (size_t k = 0; k < c; ++k) z[j] += xv[i * c + k] * wv[j * c + k];
    double mx = z[0], s = 0, smooth = 0;
    for (double e : z) mx = std::max(mx, e);
    for (double e : z) s += std::exp(e - mx);
    for (size_t j = 0; j < v; ++j) logp[j] = z[j] - mx - std::log(s), smooth -= logp[j];
    o.loss += (1 - eps) * -logp[labels[i]] + eps * smooth / static_cast<double>(v);
    for (size_t j = 0; j < v; ++j) {
      const double dz = g * (std::exp(logp[j]) - (j == static_cast<size_t>(labels[i]) ? 1 - eps : 0) - eps / v);
      for (size_t k = 0; k < c; ++k) {
        o.dx[i * c + k] += dz * wv[j * c + k];
        o.dw[j * c + k] += dz * xv[i * c + k];
      }
    }
  }
  return o;
}

TEST_F(LabelSmoothingTest, CrossEntropyPlusTheTermIsHfsSmoothedLoss) {
  const int64_t n = 11, c = 12, v = 17;
  std::vector<int32_t> labels;
  for (int64_t i = 0; i < n; ++i) labels.push_back(i % 4 == 3 ? -100 : static_cast<int32_t>((5 * i + 2) % v));
  const Tensor lab = Tensor::from_ints(labels, {n});
  for (DType wt : {DType::f32, DType::bf16})
    for (double eps : {0.1, 0.5}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(wt) << " eps=" << eps);
      Tensor x = optest::leaf({n, c}, DType::f32, 1, 0.7), w = optest::leaf({v, c}, wt, 2, 0.7);
      const Tensor loss = ops::add(ops::linear_cross_entropy(x, w, lab).loss_sum, ops::label_smoothing_term(x, w, lab, eps));
      const Oracle o = hf_label_smoother(x, w, labels, eps, 0.37);
      EXPECT_NEAR(loss.item_flat(0), o.loss, 1e-5 * (1 + std::fabs(o.loss)));
      Tensor g = Tensor::empty({}, DType::f32);
      g.fill(0.37);
      autograd::backward(loss, g);
      optest::expect_close_rel(x.grad(), o.dx, 1e-4);
      optest::expect_close_rel(w.grad(), o.dw, 1e-4);
    }
}

TEST_F(LabelSmoothingTest, UnlabelledRowsAndBadLabels) {
  Tensor x = optest::leaf({2, 4}, DType::f32, 3), w = optest::leaf({5, 4}, DType::f32, 4);
  const Tensor none = ops::label_smoothing_term(x, w, Tensor::from_ints({-100, -100}, {2}), 0.1);
  EXPECT_EQ(none.item_flat(0), 0.0f);
  EXPECT_THROW(ops::label_smoothing_term(x, w, Tensor::from_ints({0, 5}, {2}), 0.1), ShapeError);
}

}  // namespace
}  // namespace unillm
