// linear_cross_entropy: loss and gradients vs a naive oracle that builds the full logits, for
// f64 and f32 (f32/bf16/f16 lm_head), chunk sizes 1, 3 and N, ignored rows, finite differences
// in f64, the vocabulary split on three threads, frozen lm_head, all rows ignored, bad labels.
#include <cmath>

#include "grad_check_util.h"
#include "core/parallel.h"
#include "ops/cross_entropy.h"

namespace unillm {
namespace {

class CrossEntropyTest : public optest::OpTest {};

struct Oracle {
  double loss = 0;
  std::vector<double> dx, dw;
};

// Full [N, V] logits in double; gradients of loss·scale.
Oracle oracle(const Tensor& x, const Tensor& w, const std::vector<int32_t>& labels, double scale) {
  std::vector<double> xv = optest::doubles(x), wv = optest::doubles(w);
  const size_t n = labels.size(), c = xv.size() / n, v = wv.size() / c;
  Oracle o;
  o.dx.assign(n * c, 0.0);
  o.dw.assign(v * c, 0.0);
  for (size_t i = 0; i < n; ++i) {
    if (labels[i] == -100) continue;
    std::vector<double> l(v, 0.0);
    double mx = -1e300;
    for (size_t j = 0; j < v; ++j) {
      for (size_t p = 0; p < c; ++p) l[j] += xv[i * c + p] * wv[j * c + p];
      mx = std::max(mx, l[j]);
    }
    double z = 0;
    for (double e : l) z += std::exp(e - mx);
    o.loss += mx + std::log(z) - l[labels[i]];
    for (size_t j = 0; j < v; ++j) {
      double d = (std::exp(l[j] - mx) / z - (static_cast<int32_t>(j) == labels[i] ? 1 : 0)) * scale;
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
  for (auto& e : l) e = rng.next_u64() % 4 == 0 ? -100 : static_cast<int32_t>(rng.next_u64() % v);
  l[0] = static_cast<int32_t>(v - 1);
  return l;
}

TEST_F(CrossEntropyTest, MatchesOracleForEveryDtypeAndChunk) {
  const int64_t n = 11, c = 24, v = 300;
  std::vector<int32_t> labels = make_labels(n, v, 3);
  Tensor lab = Tensor::from_ints(labels, {n});
  int64_t want_count = 0;
  for (int32_t l : labels) want_count += l != -100;
  const std::pair<DType, DType> combos[] = {{DType::f64, DType::f64}, {DType::f32, DType::f32},
                                            {DType::f32, DType::bf16}, {DType::f32, DType::f16}};
  for (auto [xt, wt] : combos) {
    for (int64_t chunk : {int64_t{1}, int64_t{3}, n, int64_t{0}}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(wt) << " chunk=" << chunk);
      Tensor x = optest::leaf({n, c}, xt, 1, 0.5), w = optest::leaf({v, c}, wt, 2, 0.5);
      ops::CrossEntropyResult r = ops::linear_cross_entropy(x, w, lab, chunk);
      EXPECT_EQ(r.count, want_count);
      EXPECT_EQ(r.loss_sum.dtype(), xt);
      EXPECT_EQ(r.loss_sum.numel(), 1);
      const double scale = 0.37;
      Oracle o = oracle(x, w, labels, scale);
      const double tol = xt == DType::f64 ? 1e-12 : 1e-4;
      EXPECT_NEAR(r.loss_sum.item_flat(0), o.loss, tol * std::fabs(o.loss));
      Tensor g = Tensor::empty({}, xt);
      g.fill(scale);
      autograd::backward(r.loss_sum, g);
      ASSERT_EQ(w.grad().dtype(), xt == DType::f64 ? DType::f64 : DType::f32);
      optest::expect_close_rel(x.grad(), o.dx, tol);
      optest::expect_close_rel(w.grad(), o.dw, tol);
    }
  }
}

TEST_F(CrossEntropyTest, MatchesFiniteDifferencesInF64) {
  const int64_t n = 5, c = 4, v = 7;
  Tensor lab = Tensor::from_ints({2, -100, 6, 0, 2}, {n});
  Tensor x = optest::leaf({n, c}, DType::f64, 1), w = optest::leaf({v, c}, DType::f64, 2);
  for (int64_t chunk : {1, 2}) {
    SCOPED_TRACE(chunk);
    Tensor xi = x.detach().clone().set_requires_grad(true);
    Tensor wi = w.detach().clone().set_requires_grad(true);
    optest::check_grads([&] { return ops::linear_cross_entropy(xi, wi, lab, chunk).loss_sum; },
                        {xi, wi}, 3);
  }
}

// V = 1100 against chunks of 7 rows on two threads, f32 and bf16 (panel-converted) weights:
// bit-identical reruns, and the naive f64 reference.
// n rows of labels (a quarter ignored) over v classes.
Tensor label_tensor(int64_t n, int64_t v, uint64_t seed, std::vector<int32_t>& labels) {
  labels = make_labels(n, v, seed);
  return Tensor::from_ints(labels, {n});
}

TEST_F(CrossEntropyTest, KernelMatchesReferenceAndIsDeterministic) {
  optest::ThreadCount threads(2);
  const int64_t n = 40, c = 33, v = 1100;
  std::vector<int32_t> labels;
  Tensor lab = label_tensor(n, v, 5, labels);
  for (DType wt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(wt));
    Tensor x = optest::randn({n, c}, DType::f32, 1), w = optest::randn({v, c}, wt, 2);
    auto run = [&](Tensor& dx, Tensor& dw) {
      Tensor xl = x.detach().clone().set_requires_grad(true);
      Tensor wl = w.detach().clone().set_requires_grad(true);
      autograd::backward(ops::linear_cross_entropy(xl, wl, lab, 7).loss_sum);
      dx = xl.grad();
      dw = wl.grad();
    };
    Tensor dx1, dw1, dx2, dw2;
    run(dx1, dw1);
    run(dx2, dw2);
    EXPECT_EQ(optest::doubles(dx1), optest::doubles(dx2));
    EXPECT_EQ(optest::doubles(dw1), optest::doubles(dw2));
    // The naive reference on f64 copies.
    Tensor x64 = x.to(DType::f64), w64 = w.to(DType::f64), lse = Tensor::empty({n}, DType::f64);
    std::vector<double> loss(n);
    ops::linear_cross_entropy_reference({x64.raw_data(), w64.raw_data(), labels.data(),
                                         lse.raw_data(), loss.data(), n, c, v, 1, DType::f64,
                                         DType::f64});
    Tensor dx = Tensor::empty({n, c}, DType::f64), dw = Tensor::empty({v, c}, DType::f64);
    ops::linear_cross_entropy_backward_reference({x64.raw_data(), w64.raw_data(), labels.data(),
                                                  lse.raw_data(), 1.0, dx.raw_data(), dw.raw_data(),
                                                  n, c, v, 1, DType::f64, DType::f64});
    optest::expect_close_rel(dx1, optest::doubles(dx), 1e-4);
    optest::expect_close_rel(dw1, optest::doubles(dw), 1e-4);
  }
}

// The vocabulary split (backends/cpu/gemm/cross_entropy_gemm.h) with three parts and, for bf16 and f16
// heads at C = 1024, two ~1 MiB sub-panels per part; the eager kernel and the two-pass path both
// against the oracle.
TEST_F(CrossEntropyTest, VocabularySplitOnThreeThreadsWithSubPanels) {
  optest::ThreadCount threads(3);
  const int64_t n = 9, c = 1024, v = 1100;
  std::vector<int32_t> labels;
  Tensor lab = label_tensor(n, v, 7, labels);
  for (DType wt : {DType::f32, DType::bf16, DType::f16}) {
    for (bool eager : {false, true}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(wt) << (eager ? " eager" : " two-pass"));
      Tensor x = optest::leaf({n, c}, DType::f32, 1, 0.1), w = optest::leaf({v, c}, wt, 2, 0.1);
      const double scale = 0.5;
      ops::CrossEntropyResult r = eager ? ops::linear_cross_entropy_eager_grad(x, w, lab, scale, 4)
                                        : ops::linear_cross_entropy(x, w, lab, 4);
      Oracle o = oracle(x, w, labels, scale);
      EXPECT_NEAR(r.loss_sum.item_flat(0), o.loss, 1e-4 * std::fabs(o.loss));
      autograd::backward(r.loss_sum, Tensor::from_vector({static_cast<float>(scale)}, {}));
      optest::expect_close_rel(x.grad(), o.dx, 1e-4);
      optest::expect_close_rel(w.grad(), o.dw, 1e-4);
    }
  }
}

TEST_F(CrossEntropyTest, FrozenHeadAndIgnoredRows) {
  Tensor x = optest::leaf({4, 8}, DType::f32, 1), w = optest::randn({16, 8}, DType::bf16, 2);
  Tensor lab = Tensor::from_ints({-100, 3, -100, 15}, {4});
  autograd::backward(ops::linear_cross_entropy(x, w, lab).loss_sum);
  EXPECT_FALSE(w.grad().defined());
  std::vector<double> dx = optest::doubles(x.grad());
  for (int64_t p = 0; p < 8; ++p) {
    EXPECT_EQ(dx[p], 0.0);
    EXPECT_EQ(dx[16 + p], 0.0);
  }
  // All rows ignored: zero loss, zero count, zero gradients.
  Tensor x2 = optest::leaf({3, 8}, DType::f32, 1), w2 = optest::leaf({16, 8}, DType::f32, 2);
  auto r = ops::linear_cross_entropy(x2, w2, Tensor::from_ints({-100, -100, -100}, {3}));
  EXPECT_EQ(r.count, 0);
  EXPECT_EQ(r.loss_sum.item_flat(0), 0.0);
  autograd::backward(r.loss_sum);
  for (double e : optest::doubles(x2.grad())) EXPECT_EQ(e, 0.0);
  for (double e : optest::doubles(w2.grad())) EXPECT_EQ(e, 0.0);
}

TEST_F(CrossEntropyTest, BadLabelsAndShapesThrow) {
  Tensor x = optest::randn({3, 4}, DType::f32, 1), w = optest::randn({5, 4}, DType::f32, 2);
  optest::expect_throw_with<ShapeError>(
      [&] { ops::linear_cross_entropy(x, w, Tensor::from_ints({0, 5, 1}, {3})); },
      "label 5 at row 1 is outside the vocabulary [0, 5)");
  optest::expect_throw_with<ShapeError>(
      [&] { ops::linear_cross_entropy(x, w, Tensor::from_ints({0, -1, 1}, {3})); }, "at row 1");
  EXPECT_THROW(ops::linear_cross_entropy(x, w, Tensor::from_ints({0, 1}, {2})), ShapeError);
  EXPECT_THROW(ops::linear_cross_entropy(x, w.to(DType::f64), Tensor::from_ints({0, 1, 2}, {3})),
               DTypeError);
}

TEST_F(CrossEntropyTest, AutoChunkKeepsLogitsNear32MB) {
  EXPECT_EQ(ops::cross_entropy_auto_chunk(32000, DType::f32), (32 << 20) / (32000 * 4));
  EXPECT_EQ(ops::cross_entropy_auto_chunk(int64_t{1} << 30, DType::f32), 1);
}

}  // namespace
}  // namespace unillm

namespace unillm::ops {
namespace {

// Eager gradients (computed in the forward) equal the ones backward computes, bit for bit for the
// assumed scale, and scale exactly for another grad_out.
TEST(CrossEntropyEager, MatchesTheTwoPassGradients) {
  testing::init_cpu();
  Rng rng(5);
  const int64_t n = 7, c = 6, v = 11;
  std::vector<float> xv(n * c), wv(v * c);
  for (auto& e : xv) e = static_cast<float>(rng.normal());
  for (auto& e : wv) e = static_cast<float>(rng.normal());
  Tensor labels = Tensor::from_ints({1, -100, 3, 10, 0, -100, 4}, {n});
  auto run = [&](bool eager, float g, Tensor* dx, Tensor* dw) {
    Tensor x = Tensor::from_vector(xv, {n, c}), w = Tensor::from_vector(wv, {v, c});
    x.set_requires_grad(true);
    w.set_requires_grad(true);
    auto r = eager ? linear_cross_entropy_eager_grad(x, w, labels, 0.25, 3) : linear_cross_entropy(x, w, labels, 3);
    autograd::backward(r.loss_sum, Tensor::from_vector({g}, {}));
    *dx = x.grad();
    *dw = w.grad();
    return r.loss_sum.item_flat(0);
  };
  Tensor dx1, dw1, dx2, dw2, dx3, dw3;
  double l1 = run(false, 0.25f, &dx1, &dw1), l2 = run(true, 0.25f, &dx2, &dw2);
  EXPECT_EQ(l1, l2);
  EXPECT_EQ(dx1.to_float_vector(), dx2.to_float_vector());
  EXPECT_EQ(dw1.to_float_vector(), dw2.to_float_vector());
  run(true, 0.5f, &dx3, &dw3);  // twice the assumed scale
  auto a = dx1.to_float_vector(), b = dx3.to_float_vector();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], 2 * a[i], 1e-6) << i;
}

}  // namespace
}  // namespace unillm::ops
