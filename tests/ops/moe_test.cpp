// Mixture-of-experts ops (ops/moe.h) and the row split/concat (ops/shape.h): forwards against
// naive loops, backwards against central differences in f64, and bad input.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "grad_check_util.h"
#include "ops/moe.h"
#include "ops/moe_balance.h"
#include "ops/shape.h"

namespace unillm {
namespace {

class MoeTest : public optest::OpTest {};

Tensor i32(const std::vector<int32_t>& v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::i32);
  std::copy(v.begin(), v.end(), t.data<int32_t>());
  return t;
}

// Row t of logits [.., e]: its softmax in *p and the experts by decreasing probability.
std::vector<int> naive_route(const std::vector<double>& logits, int64_t t, int64_t e, std::vector<double>* p) {
  p->assign(logits.begin() + t * e, logits.begin() + (t + 1) * e);
  const double mx = *std::max_element(p->begin(), p->end());
  double z = 0;
  for (double& v : *p) z += (v = std::exp(v - mx));
  for (double& v : *p) v /= z;
  std::vector<int> order(static_cast<size_t>(e));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return (*p)[a] > (*p)[b]; });
  return order;
}

TEST_F(MoeTest, RouteChoosesTheLargestProbabilitiesAndTheirWeights) {
  const int64_t n = 7, e = 6, k = 3;
  Tensor logits = optest::randn({n, e}, DType::f64, 3, 2.0);
  const std::vector<double> l = optest::doubles(logits);
  for (bool normalize : {false, true}) {
    SCOPED_TRACE(normalize);
    const ops::MoeRouting r = ops::moe_route(logits, k, normalize);
    ASSERT_EQ(r.weights.shape(), (Shape{n, k}));
    const std::vector<double> w = optest::doubles(r.weights);
    for (int64_t t = 0; t < n; ++t) {
      std::vector<double> p;
      const std::vector<int> order = naive_route(l, t, e, &p);
      double chosen = 0;
      for (int64_t j = 0; j < k; ++j) chosen += p[order[j]];
      for (int64_t j = 0; j < k; ++j) {
        EXPECT_EQ(r.experts[t * k + j], order[j]) << "token " << t << " slot " << j;
        EXPECT_NEAR(w[t * k + j], normalize ? p[order[j]] / chosen : p[order[j]], 1e-14);
      }
    }
  }
}

TEST_F(MoeTest, RouteBackwardMatchesFiniteDifferences) {
  for (bool normalize : {false, true}) {
    SCOPED_TRACE(normalize);
    Tensor logits = optest::leaf({5, 8}, DType::f64, 11, 2.0);
    optest::check_grads([&] { return ops::moe_route(logits, 3, normalize).weights; }, {logits}, 12);
  }
}

TEST_F(MoeTest, CombineAddsWeightedRowsAndItsBackwardMatchesFiniteDifferences) {
  const std::vector<int32_t> idx = {2, 0, 2, 3, 0, 2};  // repeated rows add; row 1 gets nothing
  Tensor y = optest::leaf({6, 5}, DType::f64, 21), w = optest::leaf({6}, DType::f64, 22);
  Tensor out = ops::moe_combine(y, w, i32(idx), 4);
  ASSERT_EQ(out.shape(), (Shape{4, 5}));
  const std::vector<double> yv = optest::doubles(y), wv = optest::doubles(w);
  std::vector<double> want(20, 0.0);
  for (size_t i = 0; i < idx.size(); ++i)
    for (int c = 0; c < 5; ++c) want[idx[i] * 5 + c] += wv[i] * yv[i * 5 + c];
  optest::expect_near(out, want, 1e-14, 0);
  optest::check_grads([&] { return ops::moe_combine(y, w, i32(idx), 4); }, {y, w}, 23);
}

TEST_F(MoeTest, CombineF32MatchesF64) {
  const std::vector<int32_t> idx = {1, 1, 0, 4, 3, 2, 0};
  Tensor y = optest::randn({7, 33}, DType::f32, 31), w = optest::randn({7}, DType::f32, 32);
  Tensor want = ops::moe_combine(y.to(DType::f64), w.to(DType::f64), i32(idx), 5);
  optest::expect_near(ops::moe_combine(y, w, i32(idx), 5), optest::doubles(want), 1e-5, 1e-5);
}

TEST_F(MoeTest, SplitAndConcatRowsPassGradientsThrough) {
  Tensor x = optest::leaf({9, 4}, DType::f64, 41);
  optest::check_grads(
      [&] {
        auto parts = ops::split_rows(x, {3, 0, 2, 4});  // an empty block (an expert without tokens)
        return ops::concat_rows({parts[3], parts[0], parts[2]});  // a reordering, block 1 dropped
      },
      {x}, 42);
  auto parts = ops::split_rows(x, {3, 0, 2, 4});
  EXPECT_EQ(parts[1].shape(), (Shape{0, 4}));
  EXPECT_THROW(ops::split_rows(x, {3, 3}), ShapeError);
  EXPECT_THROW(ops::concat_rows({x, optest::randn({2, 5}, DType::f64, 1)}), ShapeError);
}

TEST_F(MoeTest, SigmoidBackwardMatchesFiniteDifferences) {
  Tensor x = optest::leaf({6, 1}, DType::f64, 51, 3.0);
  optest::check_grads([&] { return ops::sigmoid(x); }, {x}, 52);
  const std::vector<double> xv = optest::doubles(x);
  std::vector<double> want;
  for (double v : xv) want.push_back(1.0 / (1.0 + std::exp(-v)));
  optest::expect_near(ops::sigmoid(x), want, 1e-15, 0);
}

// transformers' load_balancing_loss_func written out for layers of logits [n, e] each: the full
// softmax, the top k, and E · Σ_e (rows choosing e / rows) · mean p_e over the real rows of
// every layer.
double naive_aux(const std::vector<std::vector<double>>& layers, int64_t n, int64_t e, int64_t k,
                 const std::vector<uint8_t>& valid) {
  std::vector<double> f(static_cast<size_t>(e), 0), pm(static_cast<size_t>(e), 0);
  double rows = 0;
  for (const auto& l : layers)
    for (int64_t t = 0; t < n; ++t) {
      if (!valid[static_cast<size_t>(t)]) continue;
      std::vector<double> p;
      const std::vector<int> order = naive_route(l, t, e, &p);
      for (int64_t j = 0; j < k; ++j) f[static_cast<size_t>(order[static_cast<size_t>(j)])] += 1;
      for (int64_t x = 0; x < e; ++x) pm[static_cast<size_t>(x)] += p[static_cast<size_t>(x)];
      rows += 1;
    }
  double s = 0;
  for (int64_t x = 0; x < e; ++x) s += (f[static_cast<size_t>(x)] / rows) * (pm[static_cast<size_t>(x)] / rows);
  return static_cast<double>(e) * s;
}

TEST_F(MoeTest, BalanceLossAndItsGradientMatchANaiveLoopAndFiniteDifferences) {
  const int64_t n = 6, e = 5, k = 2;
  const double seed = 0.7;
  const std::vector<uint8_t> valid = {1, 1, 1, 0, 1, 1};  // row 3 is padding
  Tensor a = optest::leaf({n, e}, DType::f64, 61, 2.0), b = optest::leaf({n, e}, DType::f64, 62, 2.0);
  Tensor ra = optest::randn({n, k}, DType::f64, 63), rb = optest::randn({n, k}, DType::f64, 64);
  for (bool normalize : {false, true}) {
    SCOPED_TRACE(normalize);
    a.set_grad(Tensor());
    b.set_grad(Tensor());
    // Two sparse layers feeding one balance; the objective Σ w·R over both plus seed · aux.
    auto balance = std::make_shared<ops::MoeBalance>(e, valid, seed);
    const Tensor wa = ops::moe_route(a, k, normalize, balance).weights;
    const Tensor wb = ops::moe_route(b, k, normalize, balance).weights;
    ops::moe_route(b, k, normalize, balance, /*record=*/false);  // a recompute re-run: not counted
    EXPECT_EQ(balance->layers(), 2);
    EXPECT_NEAR(balance->loss(), naive_aux({optest::doubles(a), optest::doubles(b)}, n, e, k, valid), 1e-13);
    autograd::backward(wa, ra);
    autograd::backward(wb, rb);
    auto objective = [&] {
      autograd::NoGradGuard no_grad;
      return optest::dot(ops::moe_route(a, k, normalize).weights, ra) +
             optest::dot(ops::moe_route(b, k, normalize).weights, rb) +
             seed * naive_aux({optest::doubles(a), optest::doubles(b)}, n, e, k, valid);
    };
    for (Tensor* t : {&a, &b}) {
      const std::vector<double> g = optest::doubles(t->grad());
      double* p = t->data<double>();
      for (int64_t i = 0; i < t->numel(); ++i) {
        const double v = p[i], h = 1e-6;
        p[i] = v + h;
        const double up = objective();
        p[i] = v - h;
        const double down = objective();
        p[i] = v;
        EXPECT_NEAR(g[static_cast<size_t>(i)], (up - down) / (2 * h), 1e-7) << "element " << i;
      }
    }
  }
  // Padding rows get no gradient from the balance, and a balance seeded 0 adds none.
  auto zero = std::make_shared<ops::MoeBalance>(e, valid, 0.0);
  ops::moe_route(a, k, false, zero);
  std::vector<double> dl(static_cast<size_t>(n * e), 0.0), probs(static_cast<size_t>(n * e), 0.2);
  zero->add_grad(probs, dl);
  EXPECT_EQ(*std::max_element(dl.begin(), dl.end()), 0.0);
  EXPECT_THROW(zero->record(probs, std::vector<int32_t>(4, 0), k), ShapeError);  // 2 rows of 6
}

TEST_F(MoeTest, BadInputIsRefused) {
  Tensor logits = optest::randn({3, 4}, DType::f32, 1);
  EXPECT_THROW(ops::moe_route(logits, 5, false), ShapeError);
  EXPECT_THROW(ops::moe_route(logits, 0, false), ShapeError);
  Tensor y = optest::randn({2, 3}, DType::f32, 2), w = optest::randn({2}, DType::f32, 3);
  EXPECT_THROW(ops::moe_combine(y, w, i32({0, 4}), 4), ShapeError);  // row 4 of 4
  EXPECT_THROW(ops::moe_combine(y, w, i32({0}), 4), ShapeError);  // one index for two rows
}

}  // namespace
}  // namespace unillm
