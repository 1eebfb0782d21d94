// lora_linear: forward vs a naive double oracle (fused parts at column offsets, two adapters,
// bf16 base weights, dropout masks), gradients of x, W, b, A, B vs central differences in f64
// (with and without dropout), the f32 BLAS path vs the f64 op, no dW for a frozen base, and the
// strided GEMM kernel vs its reference for every transpose combination.
#include "ops/lora_linear.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "backends/cpu/simd/isa.h"
#include "core/parallel.h"
#include "grad_check_util.h"
#include "ops/dispatch.h"
#include "ops/linear.h"

namespace unillm {
namespace {

using ops::LoraAdapterInput;
using ops::LoraPart;

class LoraLinearTest : public optest::OpTest {};

// Two adapters over a fused [q; k; v]-like W with N = 5 + 3 + 4 rows: the first on parts 0 and 2,
// the second on part 1 only.
struct Case {
  int64_t m = 6, k = 7, r = 2;
  std::vector<LoraPart> parts0{{0, 5, 0}, {8, 4, 5}}, parts1{{5, 3, 0}};
  int64_t n = 12;
};

std::vector<LoraAdapterInput> adapters(const Case& c, DType dt, bool leaves, double dropout,
                                       uint64_t seed) {
  auto make = [&](const Shape& s, uint64_t sd) {
    return leaves ? optest::leaf(s, dt, sd, 0.5) : optest::randn(s, dt, sd, 0.5);
  };
  LoraAdapterInput a0{
      make({2 * c.r, c.k}, seed), make({9, c.r}, seed + 1), c.parts0, 1.5, dropout, 77};
  LoraAdapterInput a1{
      make({c.r, c.k}, seed + 2), make({3, c.r}, seed + 3), c.parts1, 0.25, dropout, 78};
  return {a0, a1};
}

// y = x Wᵀ + b + Σ s · drop_p(x) A_pᵀ B_pᵀ in double, the masks drawn like the op.
std::vector<double> oracle(const Tensor& x, const Tensor& w, const Tensor& b,
                           const std::vector<LoraAdapterInput>& ads) {
  const int64_t m = x.size(0), k = x.size(1), n = w.size(0);
  auto xv = optest::doubles(x), wv = optest::doubles(w), bv = optest::doubles(b);
  std::vector<double> y(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = bv[j];
      for (int64_t p = 0; p < k; ++p) s += xv[i * k + p] * wv[j * k + p];
      y[i * n + j] = s;
    }
  for (const auto& ad : ads) {
    auto av = optest::doubles(ad.a), bb = optest::doubles(ad.b);
    const int64_t r = ad.b.size(1);
    for (size_t p = 0; p < ad.parts.size(); ++p) {
      std::vector<uint8_t> keep(static_cast<size_t>(m * k), 1);
      if (ad.dropout > 0)
        ops::lora_dropout_mask(ops::lora_part_seed(ad.seed, p), ad.dropout, m, k, keep.data());
      const LoraPart& pt = ad.parts[p];
      for (int64_t i = 0; i < m; ++i) {
        std::vector<double> xa(static_cast<size_t>(r), 0.0);
        for (int64_t q = 0; q < r; ++q)
          for (int64_t e = 0; e < k; ++e)
            xa[q] += (keep[i * k + e] ? xv[i * k + e] / (1 - ad.dropout) : 0.0) *
                     av[(static_cast<int64_t>(p) * r + q) * k + e];
        for (int64_t c = 0; c < pt.cols; ++c) {
          double s = 0;
          for (int64_t q = 0; q < r; ++q) s += xa[q] * bb[(pt.b_row + c) * r + q];
          y[i * n + pt.col_begin + c] += ad.scaling * s;
        }
      }
    }
  }
  return y;
}

TEST_F(LoraLinearTest, ForwardMatchesOracle) {
  Case c;
  for (DType wt : {DType::f32, DType::bf16})
    for (double p : {0.0, 0.3}) {
      SCOPED_TRACE(std::string(dtype_name(wt)) + " dropout " + std::to_string(p));
      Tensor x = optest::randn({c.m, c.k}, DType::f32, 1);
      Tensor w = optest::randn({c.n, c.k}, wt, 2);
      Tensor b = optest::randn({c.n}, DType::f32, 3);
      auto ads = adapters(c, DType::f32, false, p, 10);
      optest::expect_close_rel(ops::lora_linear(x, w, b, ads), oracle(x, w, b, ads), 1e-5);
    }
}

TEST_F(LoraLinearTest, ZeroBEqualsBaseLinear) {
  Case c;
  Tensor x = optest::randn({c.m, c.k}, DType::f32, 1), w = optest::randn({c.n, c.k}, DType::f32, 2);
  auto ads = adapters(c, DType::f32, false, 0.0, 10);
  for (auto& a : ads) a.b.fill(0.0);
  EXPECT_EQ(testing::max_abs_diff(ops::lora_linear(x, w, Tensor(), ads), ops::linear(x, w)), 0.0);
}

TEST_F(LoraLinearTest, GradientsMatchFiniteDifferencesInF64) {
  Case c;
  for (double p : {0.0, 0.4}) {
    SCOPED_TRACE("dropout " + std::to_string(p));
    Tensor x = optest::leaf({c.m, c.k}, DType::f64, 1);
    Tensor w = optest::leaf({c.n, c.k}, DType::f64, 2);
    Tensor b = optest::leaf({c.n}, DType::f64, 3);
    auto ads = adapters(c, DType::f64, true, p, 20);
    optest::check_grads([&] { return ops::lora_linear(x, w, b, ads); },
                        {x, w, b, ads[0].a, ads[0].b, ads[1].a, ads[1].b}, 4);
  }
}

TEST_F(LoraLinearTest, F32KernelsMatchF64AndFrozenBaseGetsNoGradient) {
  // Large enough for BLAS blocking; the base is frozen (bf16 and f32).
  const int64_t m = 70, k = 300, r = 8, nq = 256, nkv = 64, n = nq + 2 * nkv;
  const std::vector<LoraPart> parts{{0, nq, 0}, {nq + nkv, nkv, nq}};  // q and v
  for (DType wt : {DType::f32, DType::bf16})
    for (double p : {0.0, 0.1}) {
      SCOPED_TRACE(std::string(dtype_name(wt)) + " dropout " + std::to_string(p));
      Tensor x = optest::leaf({m, k}, DType::f32, 1);
      Tensor w = optest::randn({n, k}, wt, 2, 0.05);
      Tensor a = optest::leaf({2 * r, k}, DType::f32, 3, 0.05);
      Tensor bb = optest::leaf({nq + nkv, r}, DType::f32, 4, 0.05);
      Tensor dy = optest::randn({m, n}, DType::f32, 5);
      LoraAdapterInput ad{a, bb, parts, 2.0, p, 99};
      Tensor y = ops::lora_linear(x, w, Tensor(), {ad});
      autograd::backward(y, dy);
      EXPECT_FALSE(w.grad().defined());
      Tensor x64 = x.detach().to(DType::f64).set_requires_grad(true);
      Tensor w64 = w.to(DType::f64);
      Tensor a64 = a.detach().to(DType::f64).set_requires_grad(true);
      Tensor b64 = bb.detach().to(DType::f64).set_requires_grad(true);
      LoraAdapterInput ad64{a64, b64, parts, 2.0, p, 99};
      Tensor y64 = ops::lora_linear(x64, w64, Tensor(), {ad64});
      autograd::backward(y64, dy.to(DType::f64));
      optest::expect_close_rel(y, optest::doubles(y64), 1e-5);
      optest::expect_close_rel(x.grad(), optest::doubles(x64.grad()), 1e-5);
      optest::expect_close_rel(a.grad(), optest::doubles(a64.grad()), 1e-5);
      optest::expect_close_rel(bb.grad(), optest::doubles(b64.grad()), 1e-5);
    }
}

// kGradOnly (recompute's re-run): y is zeros, no base or B GEMM into y, and every gradient is the
// computed call's, bit for bit (dB still gets drop(x)·Aᵀ).
TEST_F(LoraLinearTest, GradOnlyGivesZerosAndTheSameGradients) {
  Case c;
  for (double p : {0.0, 0.4}) {
    SCOPED_TRACE("dropout " + std::to_string(p));
    std::vector<std::vector<double>> grads[2];
    for (int i = 0; i < 2; ++i) {
      const auto use = i == 0 ? ops::OutputUse::kValue : ops::OutputUse::kGradOnly;
      Tensor x = optest::leaf({c.m, c.k}, DType::f32, 1);
      Tensor w = optest::leaf({c.n, c.k}, DType::f32, 2);
      Tensor b = optest::leaf({c.n}, DType::f32, 3);
      auto ads = adapters(c, DType::f32, true, p, 20);
      Tensor y = ops::lora_linear(x, w, b, ads, use);
      ASSERT_EQ(y.shape(), (Shape{c.m, c.n}));
      if (i == 1) {
        EXPECT_EQ(optest::doubles(y), std::vector<double>(c.m * c.n, 0.0));
      }
      autograd::backward(y, optest::randn({c.m, c.n}, DType::f32, 4));
      for (const Tensor& t : {x, w, b, ads[0].a, ads[0].b, ads[1].a, ads[1].b})
        grads[i].push_back(optest::doubles(t.grad()));
    }
    EXPECT_EQ(grads[0], grads[1]);
  }
}

TEST_F(LoraLinearTest, SkinnyShapesMatchF64) {
  // The shapes the AVX2 kernel takes: ranks 1..16, 1-3 parts (R = P·r up to 48), K and part
  // widths not multiples of 8, row counts around the 12-row tiles, dropout on and off.
  const int64_t k = 37;
  const std::vector<int64_t> cols{29, 8, 19};
  for (int64_t m : {1, 13, 61})
    for (int64_t r : {1, 4, 8, 16})
      for (size_t np : {1, 2, 3})
        for (double p : {0.0, 0.2}) {
          SCOPED_TRACE("m " + std::to_string(m) + " r " + std::to_string(r) + " parts " +
                       std::to_string(np) + " dropout " + std::to_string(p));
          std::vector<LoraPart> parts;
          int64_t n = 3, brows = 0;  // columns [0, 3) of y carry no adapter
          for (size_t i = 0; i < np; ++i) {
            parts.push_back({n, cols[i], brows});
            n += cols[i], brows += cols[i];
          }
          Tensor x = optest::leaf({m, k}, DType::f32, 1);
          Tensor w = optest::randn({n, k}, DType::f32, 2, 0.1);
          Tensor a = optest::leaf({static_cast<int64_t>(np) * r, k}, DType::f32, 3, 0.2);
          Tensor bb = optest::leaf({brows, r}, DType::f32, 4, 0.2);
          Tensor dy = optest::randn({m, n}, DType::f32, 5);
          Tensor y = ops::lora_linear(x, w, Tensor(), {LoraAdapterInput{a, bb, parts, 0.5, p, 7}});
          autograd::backward(y, dy);
          Tensor x64 = x.detach().to(DType::f64).set_requires_grad(true);
          Tensor a64 = a.detach().to(DType::f64).set_requires_grad(true);
          Tensor b64 = bb.detach().to(DType::f64).set_requires_grad(true);
          Tensor y64 = ops::lora_linear(x64, w.to(DType::f64), Tensor(),
                                        {LoraAdapterInput{a64, b64, parts, 0.5, p, 7}});
          autograd::backward(y64, dy.to(DType::f64));
          optest::expect_close_rel(y, optest::doubles(y64), 1e-5);
          optest::expect_close_rel(x.grad(), optest::doubles(x64.grad()), 1e-5);
          optest::expect_close_rel(a.grad(), optest::doubles(a64.grad()), 1e-5);
          optest::expect_close_rel(bb.grad(), optest::doubles(b64.grad()), 1e-5);
        }
}

TEST_F(LoraLinearTest, DropoutMaskRateAndDeterminism) {
  const int64_t rows = 200, cols = 301;
  std::vector<uint8_t> k1(rows * cols), k2(rows * cols), k3(rows * cols);
  ops::lora_dropout_mask(5, 0.25, rows, cols, k1.data());
  ops::lora_dropout_mask(5, 0.25, rows, cols, k2.data());
  ops::lora_dropout_mask(6, 0.25, rows, cols, k3.data());
  EXPECT_EQ(k1, k2);
  EXPECT_NE(k1, k3);
  double kept = 0;
  for (uint8_t v : k1) kept += v;
  const double rate = kept / static_cast<double>(k1.size());
  EXPECT_NEAR(rate, 0.75, 4 * std::sqrt(0.75 * 0.25 / static_cast<double>(k1.size())));
  // Rows [40, 90) of the input drawn alone (a rank's rows under context parallelism) are the
  // whole mask's rows.
  std::vector<uint8_t> part(50 * cols);
  ops::lora_dropout_mask(5, 0.25, 50, cols, part.data(), 40);
  EXPECT_TRUE(std::equal(part.begin(), part.end(), k1.begin() + 40 * cols));
}

TEST_F(LoraLinearTest, GemmKernelMatchesReference) {
  // Small, tall/wide enough that the kernel splits m (or n) across threads, widths and depths
  // not multiples of 8 (masked tails), the AVX2 kernel's limit (a side of 64) and past it (BLAS).
  const std::vector<std::array<int64_t, 3>> sizes{
      {5, 4, 6}, {300, 7, 40}, {7, 300, 40}, {301, 24, 37}, {29, 300, 3},
      {1, 1, 1}, {13, 61, 2},  {2, 3, 301},  {64, 65, 70},  {65, 66, 67}};
  for (const auto& [m, n, k] : sizes)
    for (DType dt : {DType::f32, DType::f64})
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          SCOPED_TRACE(std::string(dtype_name(dt)) + (ta ? " At" : " A") + (tb ? " Bt" : " B") +
                       " m " + std::to_string(m) + " n " + std::to_string(n));
          const int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 2, ldc = n + 1;
          Tensor a = optest::randn({ta ? k : m, lda}, dt, 1),
                 b = optest::randn({tb ? n : k, ldb}, dt, 2);
          Tensor c1 = optest::randn({m, ldc}, dt, 3), c2 = c1.clone();
          ops::LoraGemmArgs g{a.raw_data(), b.raw_data(), c1.raw_data(), m,   n, k, lda, ldb, ldc,
                              ta,           tb,           0.7,           0.5, dt};
          auto* kernel = kernel_registry().find<ops::LoraGemmKernel>("lora_gemm", a.device().kind, dt);
          ASSERT_NE(kernel, nullptr);
          kernel(g);
          g.c = c2.raw_data();
          // The AVX2 kernel (f32, a side <= 64, a transposed B with n or k <= 64) splits no k and
          // keeps the tiling: bit-identical for any thread count (BLAS edge kernels may not be).
          const bool avx2 = cpu::isa_at_least(cpu::IsaLevel::avx2) && std::min({m, n, k}) <= 64 &&
                            (!tb || std::min(n, k) <= 64);
          if (dt == DType::f32 && avx2) {
            Tensor c3 = c2.clone();
            g.c = c3.raw_data();
            const int threads = num_threads();
            set_omp_threads(1);
            kernel(g);
            set_omp_threads(threads);
            EXPECT_EQ(testing::max_abs_diff(c1, c3), 0.0);
            g.c = c2.raw_data();
          }
          ops::lora_gemm_reference(g);
          optest::expect_close_rel(c1, optest::doubles(c2), dt == DType::f64 ? 1e-13 : 1e-6);
        }
}

TEST_F(LoraLinearTest, RejectsBadShapes) {
  Case c;
  Tensor x = optest::randn({c.m, c.k}, DType::f32, 1), w = optest::randn({c.n, c.k}, DType::f32, 2);
  auto ads = adapters(c, DType::f32, false, 0.0, 10);
  ads[0].parts[1].cols = 9;  // past W's rows
  optest::expect_throw_with<ShapeError>([&] { ops::lora_linear(x, w, Tensor(), ads); },
                                        "outside W");
  ads = adapters(c, DType::f32, false, 0.0, 10);
  ads[1].a = optest::randn({c.r + 1, c.k}, DType::f32, 3);
  optest::expect_throw_with<ShapeError>([&] { ops::lora_linear(x, w, Tensor(), ads); },
                                        "adapter 1: A");
}

}  // namespace
}  // namespace unillm
