// dora_delta: forward vs a naive double oracle written from PEFT's formula (two fused parts,
// bf16 base, dropout), gradients of x, A, B, m vs central differences of that oracle with the
// row norm held constant (PEFT detaches it), kGradOnly, the row norms, and bad shapes.
#include "ops/dora_linear.h"

#include <cmath>

#include "grad_check_util.h"

namespace unillm {
namespace {

using ops::DoraInput;
using ops::LoraPart;

class DoraLinearTest : public optest::OpTest {};

// W [12, 7] as [q 5; k 3; v 4]; the adapter on q and v (B rows [0, 5) and [5, 9)).
struct Case {
  int64_t m = 6, k = 7, r = 2, n = 12;
  std::vector<LoraPart> parts{{0, 5, 0}, {8, 4, 5}};
  double s = 1.5;
};

struct Values {  // doubles of the op's inputs
  std::vector<double> x, w, a, b, mag;
};

// Per part p: ‖W_p + s·B_p·A_p‖ per row, in B's row order.
std::vector<double> norms_of(const Case& c, const Values& v) {
  std::vector<double> out(9);
  for (size_t p = 0; p < c.parts.size(); ++p) {
    const LoraPart& pt = c.parts[p];
    for (int64_t j = 0; j < pt.cols; ++j) {
      double ss = 0;
      for (int64_t e = 0; e < c.k; ++e) {
        double ba = 0;
        for (int64_t q = 0; q < c.r; ++q)
          ba += v.b[(pt.b_row + j) * c.r + q] * v.a[(static_cast<int64_t>(p) * c.r + q) * c.k + e];
        const double wv = v.w[(pt.col_begin + j) * c.k + e] + c.s * ba;
        ss += wv * wv;
      }
      out[pt.b_row + j] = std::sqrt(ss);
    }
  }
  return out;
}

// y = (m/n − 1)·(x̃ W_pᵀ) + (m/n)·s·x̃ A_pᵀ B_pᵀ in the parts' columns, zeros elsewhere.
std::vector<double> oracle(const Case& c, const Values& v, const std::vector<double>& norms,
                           double dropout, uint64_t seed) {
  std::vector<double> y(static_cast<size_t>(c.m * c.n), 0.0);
  for (size_t p = 0; p < c.parts.size(); ++p) {
    std::vector<uint8_t> keep(static_cast<size_t>(c.m * c.k), 1);
    if (dropout > 0)
      ops::lora_dropout_mask(ops::lora_part_seed(seed, p), dropout, c.m, c.k, keep.data());
    const LoraPart& pt = c.parts[p];
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < pt.cols; ++j) {
        double base = 0, lora = 0;
        for (int64_t e = 0; e < c.k; ++e) {
          const double xd = keep[i * c.k + e] ? v.x[i * c.k + e] / (1 - dropout) : 0.0;
          base += xd * v.w[(pt.col_begin + j) * c.k + e];
          for (int64_t q = 0; q < c.r; ++q)
            lora += xd * v.a[(static_cast<int64_t>(p) * c.r + q) * c.k + e] *
                    v.b[(pt.b_row + j) * c.r + q];
        }
        const double g = v.mag[pt.b_row + j] / norms[pt.b_row + j];
        y[i * c.n + pt.col_begin + j] = (g - 1) * base + g * c.s * lora;
      }
  }
  return y;
}

struct Inputs {
  Tensor x, w, a, b, mag;
};

Inputs make(const Case& c, DType dt, DType wt, bool leaves) {
  auto t = [&](const Shape& s, uint64_t seed, double scale) {
    return leaves ? optest::leaf(s, dt, seed, scale) : optest::randn(s, dt, seed, scale);
  };
  Inputs in{t({c.m, c.k}, 1, 1.0), optest::randn({c.n, c.k}, wt, 2, 0.5), t({2 * c.r, c.k}, 3, 0.5),
            t({9, c.r}, 4, 0.5), Tensor()};
  std::vector<double> mag(9);
  for (size_t i = 0; i < mag.size(); ++i) mag[i] = 0.8 + 0.1 * static_cast<double>(i);
  in.mag = Tensor::from_vector(std::vector<float>(mag.begin(), mag.end()), {9}).to(dt);
  if (leaves) in.mag.set_requires_grad(true);
  return in;
}

DoraInput dora_input(const Case& c, const Inputs& in, double dropout) {
  return {{in.a, in.b, c.parts, c.s, dropout, 77}, in.mag};
}

Values values(const Inputs& in) {
  return {optest::doubles(in.x), optest::doubles(in.w), optest::doubles(in.a),
          optest::doubles(in.b), optest::doubles(in.mag)};
}

TEST_F(DoraLinearTest, ForwardMatchesOracle) {
  Case c;
  for (DType wt : {DType::f32, DType::bf16})
    for (double p : {0.0, 0.3}) {
      SCOPED_TRACE(std::string(dtype_name(wt)) + " dropout " + std::to_string(p));
      Inputs in = make(c, DType::f32, wt, false);
      const Values v = values(in);
      optest::expect_close_rel(ops::dora_delta(in.x, in.w, dora_input(c, in, p)),
                               oracle(c, v, norms_of(c, v), p, 77), 1e-5);
    }
}

TEST_F(DoraLinearTest, RowNormsAreThoseOfWPlusScaledBA) {
  Case c;
  Inputs in = make(c, DType::f64, DType::f64, false);
  const Values v = values(in);
  optest::expect_close_rel(ops::dora_row_norms(in.w, dora_input(c, in, 0).lora), norms_of(c, v),
                           1e-12);
}

// Central differences of Σ oracle·R over one input's values, the norm fixed at its value.
std::vector<double> numeric_grad(const Case& c, Values v, std::vector<double> Values::*field,
                                 const std::vector<double>& norms, const std::vector<double>& r,
                                 double dropout) {
  std::vector<double> g((v.*field).size());
  auto loss = [&] {
    const std::vector<double> y = oracle(c, v, norms, dropout, 77);
    double s = 0;
    for (size_t i = 0; i < y.size(); ++i) s += y[i] * r[i];
    return s;
  };
  const double eps = 1e-6;
  for (size_t i = 0; i < g.size(); ++i) {
    const double keep = (v.*field)[i];
    (v.*field)[i] = keep + eps;
    const double up = loss();
    (v.*field)[i] = keep - eps;
    const double down = loss();
    (v.*field)[i] = keep;
    g[i] = (up - down) / (2 * eps);
  }
  return g;
}

TEST_F(DoraLinearTest, GradientsMatchFiniteDifferencesWithTheNormDetached) {
  Case c;
  for (double p : {0.0, 0.4}) {
    SCOPED_TRACE("dropout " + std::to_string(p));
    Inputs in = make(c, DType::f64, DType::f64, true);
    const Values v = values(in);
    const std::vector<double> norms = norms_of(c, v);
    Tensor rt = optest::randn({c.m, c.n}, DType::f64, 9);
    autograd::backward(ops::dora_delta(in.x, in.w, dora_input(c, in, p)), rt);
    const std::vector<double> r = optest::doubles(rt);
    EXPECT_FALSE(in.w.grad().defined());
    optest::expect_near(in.x.grad(), numeric_grad(c, v, &Values::x, norms, r, p), 1e-7, 1e-6);
    optest::expect_near(in.a.grad(), numeric_grad(c, v, &Values::a, norms, r, p), 1e-7, 1e-6);
    optest::expect_near(in.b.grad(), numeric_grad(c, v, &Values::b, norms, r, p), 1e-7, 1e-6);
    optest::expect_near(in.mag.grad(), numeric_grad(c, v, &Values::mag, norms, r, p), 1e-7, 1e-6);
  }
}

TEST_F(DoraLinearTest, GradOnlyGivesZerosAndTheSameGradients) {
  Case c;
  std::vector<std::vector<double>> grads[2];
  for (int i = 0; i < 2; ++i) {
    Inputs in = make(c, DType::f32, DType::f32, true);
    const auto use = i == 0 ? ops::OutputUse::kValue : ops::OutputUse::kGradOnly;
    Tensor y = ops::dora_delta(in.x, in.w, dora_input(c, in, 0.2), use);
    if (i == 1) {
      EXPECT_EQ(optest::doubles(y), std::vector<double>(c.m * c.n, 0.0));
    }
    autograd::backward(y, optest::randn({c.m, c.n}, DType::f32, 4));
    for (const Tensor& t : {in.x, in.a, in.b, in.mag}) grads[i].push_back(optest::doubles(t.grad()));
  }
  EXPECT_EQ(grads[0], grads[1]);
}

// Serving batches requests for different adapters on runs of rows: an adapter on rows [2, 5) gives
// the full call's values there and zeros elsewhere.
TEST_F(DoraLinearTest, RowRangeMatchesTheFullCallOnItsRows) {
  Case c;
  Inputs in = make(c, DType::f32, DType::f32, false);
  const std::vector<double> full = optest::doubles(ops::dora_delta(in.x, in.w, dora_input(c, in, 0)));
  DoraInput d = dora_input(c, in, 0);
  d.lora.row_begin = 2;
  d.lora.row_end = 5;
  std::vector<double> want(full.size(), 0.0);
  std::copy(full.begin() + 2 * c.n, full.begin() + 5 * c.n, want.begin() + 2 * c.n);
  optest::expect_close_rel(ops::dora_delta(in.x, in.w, d), want, 1e-6);
}

TEST_F(DoraLinearTest, RejectsBadInputs) {
  Case c;
  Inputs in = make(c, DType::f32, DType::f32, false);
  DoraInput d = dora_input(c, in, 0);
  d.magnitude = optest::randn({8}, DType::f32, 5);
  optest::expect_throw_with<ShapeError>([&] { ops::dora_delta(in.x, in.w, d); }, "magnitude");
  Tensor w = in.w.clone();
  w.set_requires_grad(true);
  optest::expect_throw_with<NotImplemented>(
      [&] { ops::dora_delta(in.x, w, dora_input(c, in, 0)); }, "frozen");
}

}  // namespace
}  // namespace unillm
