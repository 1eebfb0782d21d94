// sequence_logprobs: per-row sums and token counts against a naive full-logits oracle, gradients
// for a different upstream gradient per sequence (f32/bf16 lm_head, chunk sizes, two threads),
// finite differences in f64, the rows reference, and shape errors.
#include <cmath>

#include "grad_check_util.h"
#include "ops/sequence_logprobs.h"

namespace unillm {
namespace {

class SequenceLogprobsTest : public optest::OpTest {};

struct Oracle {
  std::vector<double> logps, dx, dw;
  std::vector<int64_t> tokens;
};

// Full logits in double; gradients of Σ_b g[b]·logps[b].
Oracle oracle(const Tensor& x, const Tensor& w, const std::vector<int32_t>& labels, int64_t t,
              const std::vector<double>& g) {
  std::vector<double> xv = optest::doubles(x), wv = optest::doubles(w);
  const size_t n = labels.size(), c = xv.size() / n, v = wv.size() / c;
  Oracle o;
  o.logps.assign(n / t, 0.0);
  o.tokens.assign(n / t, 0);
  o.dx.assign(n * c, 0.0);
  o.dw.assign(v * c, 0.0);
  for (size_t i = 0; i < n; ++i) {
    if (labels[i] == -100) continue;
    const size_t b = i / t;
    std::vector<double> l(v, 0.0);
    double mx = -1e300;
    for (size_t j = 0; j < v; ++j) {
      for (size_t p = 0; p < c; ++p) l[j] += xv[i * c + p] * wv[j * c + p];
      mx = std::max(mx, l[j]);
    }
    double z = 0;
    for (double e : l) z += std::exp(e - mx);
    o.logps[b] += l[labels[i]] - mx - std::log(z);
    ++o.tokens[b];
    for (size_t j = 0; j < v; ++j) {
      // d logp / d logit_j = onehot − softmax
      const double d = ((static_cast<int32_t>(j) == labels[i] ? 1 : 0) - std::exp(l[j] - mx) / z) * g[b];
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

TEST_F(SequenceLogprobsTest, MatchesOracleWithOneGradientPerSequence) {
  optest::ThreadCount threads(2);
  const int64_t b = 4, t = 7, n = b * t, c = 20, v = 150;
  std::vector<int32_t> labels = make_labels(n, v, 9);
  for (int64_t i = 2 * t; i < 3 * t; ++i) labels[i] = -100;  // a row with nothing scored
  const Tensor lab = Tensor::from_ints(labels, {n});
  const std::vector<double> g = {0.7, -1.3, 2.0, 0.25};
  const std::pair<DType, DType> combos[] = {{DType::f64, DType::f64}, {DType::f32, DType::f32}, {DType::f32, DType::bf16}};
  for (auto [xt, wt] : combos) {
    for (int64_t chunk : {int64_t{1}, int64_t{5}, int64_t{0}}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(wt) << " chunk=" << chunk);
      Tensor x = optest::leaf({n, c}, xt, 1, 0.5), w = optest::leaf({v, c}, wt, 2, 0.5);
      ops::SequenceLogprobs r = ops::sequence_logprobs(x, w, lab, t, chunk);
      const Oracle o = oracle(x, w, labels, t, g);
      const double tol = xt == DType::f64 ? 1e-12 : 1e-5;
      ASSERT_EQ(r.values.size(), size_t(b));
      EXPECT_EQ(r.tokens, o.tokens);
      EXPECT_EQ(r.logps.dtype(), xt);
      for (int64_t i = 0; i < b; ++i) {
        EXPECT_NEAR(r.values[i], o.logps[i], tol * (1 + std::fabs(o.logps[i])));
        EXPECT_NEAR(r.logps.item_flat(i), o.logps[i], (xt == DType::f64 ? 1e-12 : 1e-5) * (1 + std::fabs(o.logps[i])));
      }
      EXPECT_EQ(r.values[2], 0.0);
      std::vector<double> gv = g;
      Tensor gt = Tensor::from_vector(std::vector<float>(gv.begin(), gv.end()), {b}).to(xt);
      if (xt == DType::f64) gt = Tensor::from_blob(gv.data(), {b}, DType::f64, nullptr).clone();
      autograd::backward(r.logps, gt);
      optest::expect_close_rel(x.grad(), o.dx, xt == DType::f64 ? 1e-12 : 1e-4);
      optest::expect_close_rel(w.grad(), o.dw, xt == DType::f64 ? 1e-12 : 1e-4);
    }
  }
}

TEST_F(SequenceLogprobsTest, MatchesFiniteDifferencesInF64) {
  const int64_t t = 3, n = 6, c = 4, v = 5;
  const Tensor lab = Tensor::from_ints({1, -100, 4, 0, 3, -100}, {n});
  Tensor x = optest::leaf({n, c}, DType::f64, 3), w = optest::leaf({v, c}, DType::f64, 4);
  optest::check_grads([&] { return ops::sequence_logprobs(x, w, lab, t).logps; }, {x, w}, 5);
}

// Token weights (LD-DPO): the sums and the gradient weight each position.
TEST_F(SequenceLogprobsTest, TokenWeightsScaleSumsAndGradients) {
  const int64_t t = 3, n = 6, c = 4, v = 5;
  const Tensor lab = Tensor::from_ints({1, 2, 4, 0, 3, -100}, {n});
  const std::vector<double> weight = {1, 0.5, 0.25, 1, 1, 0.7};
  Tensor x = optest::leaf({n, c}, DType::f64, 8), w = optest::leaf({v, c}, DType::f64, 9);
  const ops::SequenceLogprobs plain = ops::sequence_logprobs(x.detach(), w.detach(), lab, t);
  const ops::SequenceLogprobs one = ops::sequence_logprobs(x.detach(), w.detach(), lab, t, 0, std::vector<double>(n, 1.0));
  EXPECT_EQ(plain.values, one.values);
  // Row 0 by hand: Σ weight_i · log p_i from unit-weight rows of one position each.
  double want = 0;
  for (int64_t i = 0; i < t; ++i) {
    std::vector<int32_t> only(n, -100);
    only[i] = lab.data<int32_t>()[i];
    want += weight[i] * ops::sequence_logprobs(x.detach(), w.detach(), Tensor::from_ints(only, {n}), t).values[0];
  }
  const ops::SequenceLogprobs weighted = ops::sequence_logprobs(x.detach(), w.detach(), lab, t, 0, weight);
  EXPECT_NEAR(weighted.values[0], want, 1e-12);
  EXPECT_EQ(weighted.tokens, plain.tokens);
  optest::check_grads([&] { return ops::sequence_logprobs(x, w, lab, t, 0, weight).logps; }, {x, w}, 10);
  EXPECT_THROW(ops::sequence_logprobs(x, w, lab, t, 0, {1.0, 2.0}), ShapeError);
}

TEST_F(SequenceLogprobsTest, RowsReferenceEqualsUniformBackwardForOneScale) {
  const int64_t n = 5, c = 6, v = 9;
  std::vector<int32_t> labels = {3, -100, 8, 0, 2};
  Tensor x = optest::randn({n, c}, DType::f64, 6), w = optest::randn({v, c}, DType::f64, 7);
  Tensor lse = Tensor::empty({n}, DType::f64);
  std::vector<double> loss(n);
  ops::linear_cross_entropy_reference({x.raw_data(), w.raw_data(), labels.data(), lse.raw_data(), loss.data(), n, c,
                                       v, 1, DType::f64, DType::f64});
  Tensor dx1 = Tensor::empty({n, c}, DType::f64), dw1 = Tensor::empty({v, c}, DType::f64);
  Tensor dx2 = Tensor::empty({n, c}, DType::f64), dw2 = Tensor::empty({v, c}, DType::f64);
  ops::LinearCrossEntropyBackwardArgs a{x.raw_data(), w.raw_data(), labels.data(), lse.raw_data(), 0.4,
                                        dx1.raw_data(), dw1.raw_data(), n, c, v, 1, DType::f64, DType::f64};
  ops::linear_cross_entropy_backward_reference(a);
  const std::vector<double> scale(n, 0.4);
  ops::LinearCrossEntropyRowsBackwardArgs ra{a, scale.data()};
  ra.base.dx = dx2.raw_data();
  ra.base.dw = dw2.raw_data();
  ops::linear_cross_entropy_backward_rows_reference(ra);
  EXPECT_EQ(optest::doubles(dx1), optest::doubles(dx2));
  EXPECT_EQ(optest::doubles(dw1), optest::doubles(dw2));
}

TEST_F(SequenceLogprobsTest, RejectsASequenceLengthThatDoesNotDivideTheRows) {
  Tensor x = optest::randn({6, 4}, DType::f32, 1), w = optest::randn({5, 4}, DType::f32, 2);
  const Tensor lab = Tensor::from_ints({1, 1, 1, 1, 1, 1}, {6});
  EXPECT_THROW(ops::sequence_logprobs(x, w, lab, 4), ShapeError);
  EXPECT_THROW(ops::sequence_logprobs(x, w, lab, 0), ShapeError);
  EXPECT_THROW(ops::sequence_logprobs(x, w, Tensor::from_ints({1, 1, 1, 1, 1, 9}, {6}), 3), ShapeError);
}

}  // namespace
}  // namespace unillm
