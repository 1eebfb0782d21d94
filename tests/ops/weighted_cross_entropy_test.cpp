// weighted_cross_entropy (DFT / EAFT token weights on the fused lm_head + cross-entropy): loss,
// weights and gradients against a naive full-logits oracle (top-k by sorting, weights held
// constant), f64 / f32 / bf16 lm_head, chunk sizes, two threads; the top-k entropy reference;
// EAFT with alpha 0 is plain cross-entropy; errors.
#include "ops/weighted_cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "grad_check_util.h"
#include "ops/cross_entropy.h"

namespace unillm {
namespace {

class WeightedCrossEntropyTest : public optest::OpTest {};

using Kind = ops::TokenWeighting::Kind;

struct Oracle {
  double loss = 0;
  std::vector<double> weight, entropy, dx, dw;
};

// Full logits in double; gradients of g · loss_sum with each weight a constant.
Oracle oracle(const Tensor& x, const Tensor& w, const std::vector<int32_t>& labels,
              const ops::TokenWeighting& how, double g) {
  std::vector<double> xv = optest::doubles(x), wv = optest::doubles(w);
  const size_t n = labels.size(), c = xv.size() / n, v = wv.size() / c;
  Oracle o;
  o.weight.assign(n, 0.0);
  o.entropy.assign(n, 0.0);
  o.dx.assign(n * c, 0.0);
  o.dw.assign(v * c, 0.0);
  for (size_t i = 0; i < n; ++i) {
    if (labels[i] == -100) continue;
    std::vector<double> l(v, 0.0);
    for (size_t j = 0; j < v; ++j)
      for (size_t p = 0; p < c; ++p) l[j] += xv[i * c + p] * wv[j * c + p];
    const double mx = *std::max_element(l.begin(), l.end());
    double z = 0;
    for (double e : l) z += std::exp(e - mx);
    const double lse = mx + std::log(z), ce = lse - l[labels[i]];
    // Entropy of the softmax over the k largest logits, sorted.
    std::vector<double> top = l;
    std::sort(top.begin(), top.end(), std::greater<double>());
    top.resize(std::min<size_t>(v, static_cast<size_t>(how.top_k)));
    double zt = 0;
    for (double e : top) zt += std::exp(e - top[0]);
    for (double e : top) {
      const double p = std::exp(e - top[0]) / zt;
      o.entropy[i] -= p * std::log(p);
    }
    const double wt =
        how.kind == Kind::kDft ? std::exp(-ce) : std::pow(o.entropy[i] / 3.0, how.alpha);
    o.weight[i] = wt;
    o.loss += wt * ce;
    for (size_t j = 0; j < v; ++j) {
      const double d =
          (std::exp(l[j] - lse) - (static_cast<int32_t>(j) == labels[i] ? 1 : 0)) * wt * g;
      for (size_t p = 0; p < c; ++p) {
        o.dx[i * c + p] += d * wv[j * c + p];
        o.dw[j * c + p] += d * xv[i * c + p];
      }
    }
  }
  return o;
}

std::vector<int32_t> make_labels(int64_t n, int64_t v, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> l(static_cast<size_t>(n));
  for (auto& e : l) e = rng.next_u64() % 3 == 0 ? -100 : static_cast<int32_t>(rng.next_u64() % v);
  return l;
}

void check_against_oracle(const ops::TokenWeighting& base, int64_t v) {
  optest::ThreadCount threads(2);
  const int64_t n = 23, c = 16;
  const std::vector<int32_t> labels = make_labels(n, v, 9);
  const Tensor lab = Tensor::from_ints(labels, {n});
  const std::pair<DType, DType> combos[] = {
      {DType::f64, DType::f64}, {DType::f32, DType::f32}, {DType::f32, DType::bf16}};
  for (auto combo : combos) {
    const DType xt = combo.first, wt = combo.second;
    for (int64_t chunk : {int64_t{1}, int64_t{5}, int64_t{0}}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(wt) << " chunk=" << chunk << " V=" << v);
      ops::TokenWeighting how = base;
      how.chunk_rows = chunk;
      Tensor x = optest::leaf({n, c}, xt, 1, 0.7), w = optest::leaf({v, c}, wt, 2, 0.7);
      const ops::WeightedCrossEntropy r = ops::weighted_cross_entropy(x, w, lab, how);
      const Oracle o = oracle(x, w, labels, how, 0.37);
      const double tol = xt == DType::f64 ? 1e-12 : 1e-5;
      EXPECT_NEAR(r.loss_sum.item_flat(0), o.loss, tol * (1 + std::fabs(o.loss)));
      EXPECT_EQ(r.count, static_cast<int64_t>(std::count_if(labels.begin(), labels.end(),
                                                            [](int32_t e) { return e != -100; })));
      for (int64_t i = 0; i < n; ++i)
        EXPECT_NEAR(r.weight[i], o.weight[i], tol * (1 + o.weight[i])) << i;
      Tensor g = Tensor::empty({}, xt);
      g.fill(0.37);
      autograd::backward(r.loss_sum, g);
      optest::expect_close_rel(x.grad(), o.dx, xt == DType::f64 ? 1e-12 : 1e-4);
      optest::expect_close_rel(w.grad(), o.dw, xt == DType::f64 ? 1e-12 : 1e-4);
    }
  }
}

TEST_F(WeightedCrossEntropyTest, DftMatchesOracle) { check_against_oracle({Kind::kDft}, 150); }

TEST_F(WeightedCrossEntropyTest, EaftMatchesOracle) {
  check_against_oracle({Kind::kEaft, 1.0, 20}, 150);
  check_against_oracle({Kind::kEaft, 0.5, 20}, 150);
  check_against_oracle({Kind::kEaft, 2.0, 20}, 12);  // a vocabulary smaller than top_k: all of it
}

TEST_F(WeightedCrossEntropyTest, TopkReferenceMatchesOracleEntropy) {
  const int64_t n = 7, c = 5, v = 40;
  const std::vector<int32_t> labels = {3, -100, 39, 0, 7, 7, -100};
  Tensor x = optest::randn({n, c}, DType::f64, 3), w = optest::randn({v, c}, DType::f64, 4);
  Tensor lse = Tensor::empty({n}, DType::f64);
  std::vector<double> loss(n), entropy(n, -1.0);
  ops::LinearCrossEntropyTopkArgs a{{x.raw_data(), w.raw_data(), labels.data(), lse.raw_data(),
                                     loss.data(), n, c, v, 1, DType::f64, DType::f64},
                                    20,
                                    entropy.data()};
  ops::linear_cross_entropy_topk_reference(a);
  const Oracle o = oracle(x, w, labels, {Kind::kEaft, 1.0, 20}, 1.0);
  for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(entropy[i], o.entropy[i], 1e-12) << i;
  EXPECT_EQ(entropy[1], 0.0);
}

TEST_F(WeightedCrossEntropyTest, EaftWithAlphaZeroIsPlainCrossEntropy) {
  const int64_t n = 9, c = 6, v = 30;
  const Tensor lab = Tensor::from_ints(make_labels(n, v, 5), {n});
  Tensor x1 = optest::leaf({n, c}, DType::f64, 6), w1 = optest::leaf({v, c}, DType::f64, 7);
  Tensor x2 = optest::leaf({n, c}, DType::f64, 6), w2 = optest::leaf({v, c}, DType::f64, 7);
  const auto weighted = ops::weighted_cross_entropy(x1, w1, lab, {Kind::kEaft, 0.0, 20});
  const auto plain = ops::linear_cross_entropy(x2, w2, lab);
  EXPECT_NEAR(weighted.loss_sum.item_flat(0), plain.loss_sum.item_flat(0), 1e-12);
  EXPECT_NEAR(weighted.ce_sum, plain.loss_sum.item_flat(0), 1e-12);
  autograd::backward(weighted.loss_sum);
  autograd::backward(plain.loss_sum);
  optest::expect_close_rel(x1.grad(), optest::doubles(x2.grad()), 1e-12);
  optest::expect_close_rel(w1.grad(), optest::doubles(w2.grad()), 1e-12);
}

TEST_F(WeightedCrossEntropyTest, NoLabelledRowsGiveZeroLossAndGradients) {
  Tensor x = optest::leaf({3, 4}, DType::f32, 1), w = optest::leaf({5, 4}, DType::f32, 2);
  const auto r =
      ops::weighted_cross_entropy(x, w, Tensor::from_ints({-100, -100, -100}, {3}), {Kind::kEaft});
  EXPECT_EQ(r.loss_sum.item_flat(0), 0.0);
  EXPECT_EQ(r.count, 0);
  autograd::backward(r.loss_sum);
  EXPECT_EQ(optest::doubles(x.grad()), std::vector<double>(12, 0.0));
}

TEST_F(WeightedCrossEntropyTest, RejectsBadLabelsAndTopK) {
  Tensor x = optest::randn({2, 4}, DType::f32, 1), w = optest::randn({5, 4}, DType::f32, 2);
  EXPECT_THROW(ops::weighted_cross_entropy(x, w, Tensor::from_ints({1, 5}, {2}), {Kind::kDft}),
               ShapeError);
  EXPECT_THROW(
      ops::weighted_cross_entropy(x, w, Tensor::from_ints({1, 2}, {2}), {Kind::kEaft, 1.0, 0}),
      ShapeError);
}

}  // namespace
}  // namespace unillm
