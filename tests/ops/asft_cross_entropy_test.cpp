// asft_cross_entropy (LLaMA-Factory's ASFT: DFT's term + alpha·KL(reference ‖ policy)) against a
// naive full-logits oracle: loss, per-part sums and gradients of x and W (f64 / f32 / bf16
// lm_heads, a reference head of another dtype, chunk sizes, two threads, an assumed d(loss) other
// than the actual one); the reference implementation; KL = 0 against itself; alpha 0 is DFT;
// errors.
#include "ops/asft_cross_entropy.h"

#include <cmath>

#include "grad_check_util.h"
#include "ops/weighted_cross_entropy.h"

namespace unillm {
namespace {

class AsftCrossEntropyTest : public optest::OpTest {};

struct Oracle {
  double loss = 0, dft = 0, kl = 0;
  std::vector<double> dx, dw;
};

std::vector<double> log_softmax_row(const std::vector<double>& xv, const std::vector<double>& wv,
                                    size_t i, size_t c, size_t v) {
  std::vector<double> l(v, 0.0);
  for (size_t j = 0; j < v; ++j)
    for (size_t p = 0; p < c; ++p) l[j] += xv[i * c + p] * wv[j * c + p];
  double mx = -1e300, z = 0;
  for (double e : l) mx = std::max(mx, e);
  for (double e : l) z += std::exp(e - mx);
  for (double& e : l) e -= mx + std::log(z);
  return l;
}

// Gradients of g · loss with exp(−CE) held constant.
Oracle oracle(const Tensor& x, const Tensor& w, const Tensor& xr, const Tensor& wr,
              const std::vector<int32_t>& labels, double alpha, double g) {
  const std::vector<double> xv = optest::doubles(x), wv = optest::doubles(w),
                            xrv = optest::doubles(xr), wrv = optest::doubles(wr);
  const size_t n = labels.size(), c = xv.size() / n, v = wv.size() / c;
  Oracle o;
  o.dx.assign(n * c, 0.0);
  o.dw.assign(v * c, 0.0);
  for (size_t i = 0; i < n; ++i) {
    if (labels[i] == -100) continue;
    const std::vector<double> lp = log_softmax_row(xv, wv, i, c, v),
                              lq = log_softmax_row(xrv, wrv, i, c, v);
    const double ce = -lp[labels[i]], wt = std::exp(-ce);
    double kl = 0;
    for (size_t j = 0; j < v; ++j) kl += std::exp(lq[j]) * (lq[j] - lp[j]);
    o.dft += wt * ce;
    o.kl += kl;
    for (size_t j = 0; j < v; ++j) {
      const double p = std::exp(lp[j]), q = std::exp(lq[j]);
      const double d =
          g * (wt * (p - (static_cast<int32_t>(j) == labels[i] ? 1 : 0)) + alpha * (p - q));
      for (size_t k = 0; k < c; ++k) {
        o.dx[i * c + k] += d * wv[j * c + k];
        o.dw[j * c + k] += d * xv[i * c + k];
      }
    }
  }
  o.loss = o.dft + alpha * o.kl;
  return o;
}

std::vector<int32_t> make_labels(int64_t n, int64_t v, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> l(static_cast<size_t>(n));
  for (auto& e : l) e = rng.next_u64() % 3 == 0 ? -100 : static_cast<int32_t>(rng.next_u64() % v);
  return l;
}

TEST_F(AsftCrossEntropyTest, MatchesOracle) {
  optest::ThreadCount threads(2);
  const int64_t n = 19, c = 12, v = 90;
  const std::vector<int32_t> labels = make_labels(n, v, 4);
  const Tensor lab = Tensor::from_ints(labels, {n});
  struct Combo {
    DType x, w, wr;
  };
  for (Combo k :
       {Combo{DType::f64, DType::f64, DType::f64}, Combo{DType::f32, DType::f32, DType::f32},
        Combo{DType::f32, DType::bf16, DType::f32}, Combo{DType::f32, DType::f32, DType::bf16}}) {
    for (int64_t chunk : {int64_t{1}, int64_t{4}, int64_t{0}}) {
      for (double assumed : {0.37, 1.0}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(k.w) << "/" << dtype_name(k.wr)
                                          << " chunk=" << chunk << " assumed=" << assumed);
        Tensor x = optest::leaf({n, c}, k.x, 1, 0.6), w = optest::leaf({v, c}, k.w, 2, 0.6);
        const Tensor xr = optest::randn({n, c}, k.x, 3, 0.6),
                     wr = optest::randn({v, c}, k.wr, 4, 0.6);
        const auto r = ops::asft_cross_entropy(x, w, xr, wr, lab, {0.3, assumed, chunk});
        const Oracle o = oracle(x, w, xr, wr, labels, 0.3, 0.37);
        const double tol = k.x == DType::f64 ? 1e-12 : 1e-5;
        EXPECT_NEAR(r.loss_sum.item_flat(0), o.loss, tol * (1 + std::fabs(o.loss)));
        EXPECT_NEAR(r.dft_sum, o.dft, tol * (1 + o.dft));
        EXPECT_NEAR(r.kl_sum, o.kl, tol * (1 + o.kl));
        Tensor g = Tensor::empty({}, k.x);
        g.fill(0.37);
        autograd::backward(r.loss_sum, g);
        optest::expect_close_rel(x.grad(), o.dx, k.x == DType::f64 ? 1e-11 : 1e-4);
        optest::expect_close_rel(w.grad(), o.dw, k.x == DType::f64 ? 1e-11 : 1e-4);
      }
    }
  }
}

TEST_F(AsftCrossEntropyTest, ReferenceMatchesOracle) {
  const int64_t n = 6, c = 5, v = 11;
  const std::vector<int32_t> labels = {3, -100, 10, 0, 7, 7};
  Tensor x = optest::randn({n, c}, DType::f64, 3), w = optest::randn({v, c}, DType::f64, 4);
  Tensor xr = optest::randn({n, c}, DType::f64, 5), wr = optest::randn({v, c}, DType::f64, 6);
  std::vector<double> ce(n), kl(n);
  Tensor dx = Tensor::empty({n, c}, DType::f64), dw = Tensor::empty({v, c}, DType::f64);
  ops::AsftCrossEntropyArgs a{x.raw_data(),
                              w.raw_data(),
                              xr.raw_data(),
                              wr.raw_data(),
                              labels.data(),
                              ce.data(),
                              kl.data(),
                              0.5,
                              2.0,
                              dx.raw_data(),
                              dw.raw_data(),
                              n,
                              c,
                              v,
                              1,
                              DType::f64,
                              DType::f64,
                              DType::f64};
  ops::asft_cross_entropy_reference(a);
  const Oracle o = oracle(x, w, xr, wr, labels, 0.5, 2.0);
  double dft = 0, kls = 0;
  for (int64_t i = 0; i < n; ++i) {
    dft += std::exp(-ce[i]) * ce[i];
    kls += kl[i];
  }
  EXPECT_NEAR(dft, o.dft, 1e-12);
  EXPECT_NEAR(kls, o.kl, 1e-12);
  EXPECT_EQ(ce[1], 0.0);
  optest::expect_close_rel(dx, o.dx, 1e-12);
  optest::expect_close_rel(dw, o.dw, 1e-12);
}

TEST_F(AsftCrossEntropyTest, KlAgainstItselfIsZeroAndAlphaZeroIsDft) {
  const int64_t n = 8, c = 6, v = 25;
  const Tensor lab = Tensor::from_ints(make_labels(n, v, 8), {n});
  Tensor x = optest::leaf({n, c}, DType::f64, 1), w = optest::leaf({v, c}, DType::f64, 2);
  const auto self =
      ops::asft_cross_entropy(x.detach(), w.detach(), x.detach(), w.detach(), lab, {0.1, 1.0, 0});
  EXPECT_NEAR(self.kl_sum, 0.0, 1e-12);
  Tensor x2 = optest::leaf({n, c}, DType::f64, 1), w2 = optest::leaf({v, c}, DType::f64, 2);
  const Tensor xr = optest::randn({n, c}, DType::f64, 3);
  const auto asft = ops::asft_cross_entropy(x, w, xr, w.detach(), lab, {0.0, 1.0, 0});
  const auto dft = ops::weighted_cross_entropy(x2, w2, lab, {ops::TokenWeighting::Kind::kDft});
  EXPECT_NEAR(asft.loss_sum.item_flat(0), dft.loss_sum.item_flat(0), 1e-12);
  autograd::backward(asft.loss_sum);
  autograd::backward(dft.loss_sum);
  optest::expect_close_rel(x.grad(), optest::doubles(x2.grad()), 1e-12);
  optest::expect_close_rel(w.grad(), optest::doubles(w2.grad()), 1e-12);
}

TEST_F(AsftCrossEntropyTest, RejectsMismatchedShapesAndLabels) {
  Tensor x = optest::randn({2, 4}, DType::f32, 1), w = optest::randn({5, 4}, DType::f32, 2);
  const Tensor lab = Tensor::from_ints({1, 2}, {2});
  EXPECT_THROW(ops::asft_cross_entropy(x, w, optest::randn({3, 4}, DType::f32, 3), w, lab, {}),
               ShapeError);
  EXPECT_THROW(ops::asft_cross_entropy(x, w, x, optest::randn({6, 4}, DType::f32, 3), lab, {}),
               ShapeError);
  EXPECT_THROW(ops::asft_cross_entropy(x, w, x, w, Tensor::from_ints({1, 5}, {2}), {}), ShapeError);
  EXPECT_THROW(ops::asft_cross_entropy(x, w, x.to(DType::f64), w, lab, {}), DTypeError);
}

}  // namespace
}  // namespace unillm
