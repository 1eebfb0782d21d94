// The CPU's GEMM provider and bf16 compute (backends/cpu/gemm/provider.h, bf16_compute.h):
// sgemm (oneDNN at the avx512 levels, OpenBLAS below) and the bf16 GEMM against a double oracle
// for every transpose, padded strides and beta; then linear, its backward and the fused
// cross-entropy under ops::MatmulCompute::bf16, which must equal the double products of the
// bf16-rounded operands (f32 accumulation) and must not equal the unrounded ones. The bf16 tests
// skip where the chosen level has no bf16 GEMM (UNILLM_ISA below avx512_bf16, or an older CPU).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/gemm/provider.h"
#include "backends/cpu/simd/convert.h"
#include "core/rng.h"
#include "grad_check_util.h"
#include "ops/cross_entropy.h"
#include "ops/linear.h"
#include "ops/matmul_compute.h"

namespace unillm {
namespace {

class Bf16ComputeTest : public optest::OpTest {};

// In the test body (GTEST_SKIP returns from the function it is in).
#define REQUIRE_BF16_GEMM()                                                                    \
  if (!cpu::bf16_gemm_available())                                                            \
  GTEST_SKIP() << "no bf16 GEMM at this ISA level (" << cpu::isa_name(cpu::chosen_isa()) << ")"

// The value of an f32 tensor after rounding to bf16, as doubles.
std::vector<double> rounded(const Tensor& t) { return optest::doubles(t.to(DType::bf16)); }

struct Gemm {
  int64_t m, n, k;
  bool ta, tb;
};

// c = op(a)·op(b) (+ c0 when beta is 1) in double; bound = Σ|products| + |c0|.
void gemm_oracle(const Gemm& g, const std::vector<double>& a, int64_t lda,
                 const std::vector<double>& b, int64_t ldb, const std::vector<float>& c0,
                 int64_t ldc, double beta, std::vector<double>& c, std::vector<double>& bound) {
  c.assign(g.m * g.n, 0.0);
  bound.assign(g.m * g.n, 0.0);
  for (int64_t i = 0; i < g.m; ++i)
    for (int64_t j = 0; j < g.n; ++j) {
      double s = beta * c0[i * ldc + j], abs = std::fabs(s);
      for (int64_t p = 0; p < g.k; ++p) {
        const double x = g.ta ? a[p * lda + i] : a[i * lda + p];
        const double y = g.tb ? b[j * ldb + p] : b[p * ldb + j];
        s += x * y;
        abs += std::fabs(x * y);
      }
      c[i * g.n + j] = s;
      bound[i * g.n + j] = abs;
    }
}

const Gemm kGemms[] = {{1, 1, 1, false, false}, {5, 7, 3, false, true},  {64, 33, 130, true, false},
                       {17, 131, 300, true, true}, {130, 70, 64, false, false}, {3, 200, 90, false, true}};

// Runs fn(g, a, lda, b, ldb, beta, c, ldc) on padded operands and checks c against the oracle of
// the operands as fn sees them (round_inputs: after bf16 rounding).
template <typename Fn>
void check_gemms(bool round_inputs, Fn&& fn) {
  uint64_t seed = 10;
  for (const Gemm& g : kGemms)
    for (double beta : {0.0, 1.0}) {
      SCOPED_TRACE(::testing::Message() << "m=" << g.m << " n=" << g.n << " k=" << g.k << " ta=" << g.ta
                                        << " tb=" << g.tb << " beta=" << beta);
      const int64_t ar = g.ta ? g.k : g.m, ac = g.ta ? g.m : g.k, lda = ac + 3;
      const int64_t br = g.tb ? g.n : g.k, bc = g.tb ? g.k : g.n, ldb = bc + 5;
      const int64_t ldc = g.n + 2;
      Tensor a = optest::randn({ar, lda}, DType::f32, seed++), b = optest::randn({br, ldb}, DType::f32, seed++);
      Tensor c = optest::randn({g.m, ldc}, DType::f32, seed++);
      std::vector<float> c0(c.data<float>(), c.data<float>() + c.numel());
      std::vector<double> av = round_inputs ? rounded(a) : optest::doubles(a);
      std::vector<double> bv = round_inputs ? rounded(b) : optest::doubles(b);
      std::vector<double> want, bound;
      gemm_oracle(g, av, lda, bv, ldb, c0, ldc, beta, want, bound);
      fn(g, a, lda, b, ldb, static_cast<float>(beta), c.data<float>(), ldc);
      int bad = 0;
      for (int64_t i = 0; i < g.m; ++i)
        for (int64_t j = 0; j < g.n; ++j) {
          const double got = c.data<float>()[i * ldc + j], w = want[i * g.n + j];
          if (!(std::fabs(got - w) <= 1e-6 + 2e-6 * bound[i * g.n + j]) && ++bad <= 3)
            ADD_FAILURE() << "c[" << i << "," << j << "] = " << got << ", want " << w;
        }
      EXPECT_EQ(bad, 0);
      // The padding columns of c are never written.
      for (int64_t i = 0; i < g.m; ++i)
        for (int64_t j = g.n; j < ldc; ++j) ASSERT_EQ(c.data<float>()[i * ldc + j], c0[i * ldc + j]);
    }
}

TEST_F(Bf16ComputeTest, SgemmOfTheChosenProviderMatchesDouble) {
  SCOPED_TRACE(cpu::gemm_provider_name());
  check_gemms(false, [](const Gemm& g, const Tensor& a, int64_t lda, const Tensor& b, int64_t ldb,
                        float beta, float* c, int64_t ldc) {
    cpu::sgemm(g.ta, g.tb, g.m, g.n, g.k, 1.0f, a.data<float>(), lda, b.data<float>(), ldb, beta, c, ldc);
  });
}

TEST_F(Bf16ComputeTest, Bf16GemmIsTheProductOfRoundedInputsInF32) {
  REQUIRE_BF16_GEMM();
  check_gemms(true, [](const Gemm& g, const Tensor& a, int64_t lda, const Tensor& b, int64_t ldb,
                       float beta, float* c, int64_t ldc) {
    Tensor a16 = a.to(DType::bf16), b16 = b.to(DType::bf16);
    cpu::gemm_bf16(g.ta, g.tb, g.m, g.n, g.k, static_cast<const uint16_t*>(a16.raw_data()), lda,
                   static_cast<const uint16_t*>(b16.raw_data()), ldb, beta, c, ldc);
  });
}

// from_f32 to bf16 at the chosen level (vcvtne2ps2bf16 from avx512_bf16, AVX2 below) gives the
// scalar rule's bits (core/dtype.h f32_to_bf16: nearest even, NaN kept quiet) for every length's
// tail, ties, infinities and NaN; denormal inputs may become zero (the instruction's DAZ).
TEST_F(Bf16ComputeTest, Bf16ConversionMatchesTheScalarRule) {
  SCOPED_TRACE(cpu::isa_name(cpu::chosen_isa()));
  std::vector<float> v;
  Rng rng(5);
  for (int i = 0; i < 200; ++i) v.push_back(static_cast<float>(rng.normal() * 100));
  const uint32_t bits[] = {0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x7f800000u, 0xff800000u,
                           0x00000001u, 0x807fffffu, 0x7f7fffffu, 0x7fc00001u, 0xffa00000u};
  for (uint32_t b : bits) {
    float f;
    std::memcpy(&f, &b, 4);
    v.push_back(f);
  }
  for (int64_t n = 0; n <= static_cast<int64_t>(v.size()); n += n < 70 ? 1 : 37) {
    std::vector<uint16_t> got(n + 1, 0xabcd);
    cpu::from_f32(v.data() + v.size() - n, DType::bf16, got.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const float f = v[v.size() - n + i];
      const uint16_t want = f32_to_bf16(f);
      if (std::isnan(f)) {
        EXPECT_EQ(got[i] & 0x7f80, 0x7f80) << i;  // a NaN stays a NaN
        EXPECT_NE(got[i] & 0x7f, 0) << i;
      } else if (std::fpclassify(f) == FP_SUBNORMAL) {
        // vcvtne2ps2bf16 treats denormal inputs as zero (documented in docs/training.md).
        EXPECT_TRUE(got[i] == want || (got[i] & 0x7fff) == 0) << "n=" << n << " i=" << i;
      } else {
        ASSERT_EQ(got[i], want) << "n=" << n << " i=" << i << " f=" << f;
      }
    }
    EXPECT_EQ(got[n], 0xabcd) << "wrote past the end, n=" << n;
  }
}

// More distinct shapes than the primitive cache holds (prompt lengths at inference): results stay
// right across the cache's refill.
TEST_F(Bf16ComputeTest, Bf16GemmStaysRightPastThePrimitiveCache) {
  REQUIRE_BF16_GEMM();
  const int64_t n = 5, k = 4;
  std::vector<uint16_t> a(300 * k), b(k * n);
  for (size_t i = 0; i < a.size(); ++i) a[i] = f32_to_bf16(static_cast<float>(i % 7) - 3);
  for (size_t i = 0; i < b.size(); ++i) b[i] = f32_to_bf16(static_cast<float>(i % 5) - 2);
  for (int64_t m = 1; m <= 300; ++m) {
    std::vector<float> c(m * n);
    cpu::gemm_bf16(false, false, m, n, k, a.data(), k, b.data(), n, 0.0f, c.data(), n);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        float want = 0;  // small integers: exact in any order
        for (int64_t p = 0; p < k; ++p) want += bf16_to_f32(a[i * k + p]) * bf16_to_f32(b[p * n + j]);
        ASSERT_EQ(c[i * n + j], want) << "m=" << m;
      }
  }
}

// Largest |got − want| / (Σ|x·w| bound) over the elements.
double worst(const Tensor& got, const std::vector<double>& want, const std::vector<double>& scale) {
  std::vector<double> g = optest::doubles(got);
  double w = 0;
  for (size_t i = 0; i < g.size(); ++i) w = std::max(w, std::fabs(g[i] - want[i]) / scale[i]);
  return w;
}

// y = x·Wᵀ with its Σ|x·w| per element.
void linear_oracle(const std::vector<double>& x, const std::vector<double>& w, int64_t m, int64_t n,
                   int64_t k, std::vector<double>& y, std::vector<double>& bound) {
  y.assign(m * n, 0.0);
  bound.assign(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p) {
        y[i * n + j] += x[i * k + p] * w[j * k + p];
        bound[i * n + j] += std::fabs(x[i * k + p] * w[j * k + p]);
      }
}

TEST_F(Bf16ComputeTest, LinearRoundsBothInputsAndAccumulatesInF32) {
  REQUIRE_BF16_GEMM();
  const int64_t m = 37, k = 300, n = 130;
  for (DType wt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(wt));
    Tensor x = optest::randn({m, k}, DType::f32, 1), w = optest::randn({n, k}, wt, 2);
    std::vector<double> y_r, y_u, bound;
    linear_oracle(rounded(x), rounded(w), m, n, k, y_r, bound);
    linear_oracle(optest::doubles(x), optest::doubles(w), m, n, k, y_u, bound);
    Tensor y, y_again, y_f32 = ops::linear(x, w);
    {
      ops::MatmulComputeScope bf16(ops::MatmulCompute::bf16);
      y = ops::linear(x, w);
      y_again = ops::linear(x, w);
    }
    EXPECT_LT(worst(y, y_r, bound), 2e-6);
    EXPECT_LT(worst(y_f32, y_u, bound), 2e-6);  // the scope ended: f32 again
    EXPECT_EQ(0, std::memcmp(y.raw_data(), y_again.raw_data(), y.nbytes()));  // deterministic
    // x is not bf16-exact, so rounding it shows: bf16 compute is really on.
    EXPECT_GT(worst(y, y_u, bound), 1e-4);
  }
}

TEST_F(Bf16ComputeTest, DecodeSizedLinearStaysF32) {
  REQUIRE_BF16_GEMM();
  Tensor x = optest::randn({3, 300}, DType::f32, 1), w = optest::randn({70, 300}, DType::f32, 2);
  std::vector<double> y_u, bound;
  linear_oracle(optest::doubles(x), optest::doubles(w), 3, 70, 300, y_u, bound);
  ops::MatmulComputeScope bf16(ops::MatmulCompute::bf16);
  EXPECT_LT(worst(ops::linear(x, w), y_u, bound), 2e-6);  // the GEMV multiplies f32 values
}

TEST_F(Bf16ComputeTest, LinearBackwardTakesBf16Operands) {
  REQUIRE_BF16_GEMM();
  const int64_t m = 40, k = 96, n = 72;
  Tensor x = optest::leaf({m, k}, DType::f32, 5), w = optest::leaf({n, k}, DType::f32, 6);
  Tensor dy = optest::randn({m, n}, DType::f32, 8);
  {
    ops::MatmulComputeScope bf16(ops::MatmulCompute::bf16);
    autograd::backward(ops::linear(x, w), dy);
  }
  const std::vector<double> xr = rounded(x), wr = rounded(w), dyr = rounded(dy);
  std::vector<double> dx(m * k, 0.0), dxb(m * k, 0.0), dw(n * k, 0.0), dwb(n * k, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p) {
        dx[i * k + p] += dyr[i * n + j] * wr[j * k + p];
        dxb[i * k + p] += std::fabs(dyr[i * n + j] * wr[j * k + p]);
        dw[j * k + p] += dyr[i * n + j] * xr[i * k + p];
        dwb[j * k + p] += std::fabs(dyr[i * n + j] * xr[i * k + p]);
      }
  EXPECT_LT(worst(x.grad(), dx, dxb), 2e-6);
  EXPECT_LT(worst(w.grad(), dw, dwb), 2e-6);
}

TEST_F(Bf16ComputeTest, CrossEntropyLogitsAndGradientsUseBf16Products) {
  REQUIRE_BF16_GEMM();
  const int64_t n = 23, c = 40, v = 500;
  std::vector<int32_t> labels(n);
  for (int64_t i = 0; i < n; ++i) labels[i] = i % 5 == 4 ? -100 : static_cast<int32_t>((i * 37) % v);
  Tensor lab = Tensor::from_ints(labels, {n});
  for (DType wt : {DType::f32, DType::bf16}) {
    for (int64_t chunk : {int64_t{7}, int64_t{0}}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(wt) << " chunk=" << chunk);
      Tensor x = optest::leaf({n, c}, DType::f32, 1, 0.5), w = optest::leaf({v, c}, wt, 2, 0.5);
      const std::vector<double> xr = rounded(x), wr = rounded(w);
      // Loss in double from the rounded operands; the softmax gradient (p − onehot) is formed in
      // f32 and rounded to bf16 once more before its two GEMMs, hence the looser gradient bound.
      double loss = 0;
      std::vector<double> dx(n * c, 0.0), dw(v * c, 0.0);
      for (int64_t i = 0; i < n; ++i) {
        if (labels[i] == -100) continue;
        std::vector<double> l(v, 0.0);
        for (int64_t j = 0; j < v; ++j)
          for (int64_t p = 0; p < c; ++p) l[j] += xr[i * c + p] * wr[j * c + p];
        double mx = *std::max_element(l.begin(), l.end()), z = 0;
        for (double e : l) z += std::exp(e - mx);
        loss += mx + std::log(z) - l[labels[i]];
        for (int64_t j = 0; j < v; ++j) {
          const double d = std::exp(l[j] - mx) / z - (j == labels[i] ? 1 : 0);
          for (int64_t p = 0; p < c; ++p) {
            dx[i * c + p] += d * wr[j * c + p];
            dw[j * c + p] += d * xr[i * c + p];
          }
        }
      }
      ops::CrossEntropyResult r;
      {
        ops::MatmulComputeScope bf16(ops::MatmulCompute::bf16);
        r = ops::linear_cross_entropy(x, w, lab, chunk);
        autograd::backward(r.loss_sum, Tensor::from_vector({1.0f}, {}, DType::f32));
      }
      EXPECT_NEAR(r.loss_sum.item_flat(0), loss, 2e-6 * std::fabs(loss));
      optest::expect_close_rel(x.grad(), dx, 1e-2);
      optest::expect_close_rel(w.grad(), dw, 1e-2);
    }
  }
}

}  // namespace
}  // namespace unillm
