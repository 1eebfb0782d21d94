// Weight-only quantisation (ops/quant.h): the codes and scales against the formulas written out
// again here, the dequantisation error bound, and linear_q's kernels (GEMV for M <= 4, dequantised
// panels + GEMM above; run at every ISA level by ops_tests_isa_*) against an f32 product with
// the dequantised weight computed in double here; its backward against the same.
#include <algorithm>
#include <cmath>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "op_test_util.h"
#include "ops/quant.h"

namespace unillm {
namespace {

using ops::QuantizedWeight;
using ops::QuantType;

struct Format {
  QuantType type;
  int64_t group;
  bool symmetric;
  const char* name;
  DType scales = DType::f32;
};
const Format kFormats[] = {{QuantType::int8, 0, true, "int8"},
                           {QuantType::int4, 32, true, "int4 g32 sym"},
                           {QuantType::int4, 32, false, "int4 g32 asym"},
                           {QuantType::int4, 64, false, "int4 g64 asym"},
                           {QuantType::int4, 128, true, "int4 g128 sym"},
                           {QuantType::int4, 5, false, "int4 g5 (groups start mid-byte)"},
                           {QuantType::int8, 0, true, "int8 f16 scales", DType::f16},
                           {QuantType::int4, 32, false, "int4 g32 asym f16 scales", DType::f16},
                           {QuantType::int4, 32, true, "int4 g32 sym f16 scales", DType::f16},
                           {QuantType::int4, 128, false, "int4 g128 asym f16 scales", DType::f16},
                           {QuantType::int4, 64, true, "int4 g64 sym f16 scales", DType::f16},
                           {QuantType::int4, 256, false, "int4 g256 asym f16 scales (wider than some K)", DType::f16},
                           {QuantType::int4, 5, false, "int4 g5 f16 scales", DType::f16}};

// The value code j of row r stands for, from the formulas of quant.h (independent of quant.cpp).
double dequant(const QuantizedWeight& q, int64_t r, int64_t j) {
  const int64_t G = q.groups(), g = j / q.group;
  const double scale = q.scales.item({r, g});
  if (q.type == QuantType::int8) return scale * q.data.item({r, j});
  const auto byte = static_cast<int>(q.data.item({r, j / 2}));
  const int code = j % 2 ? byte >> 4 : byte & 15;
  (void)G;
  return q.symmetric ? scale * (code - 8) : scale * code + q.mins.item({r, g});
}

class QuantTest : public optest::OpTest {};

TEST_F(QuantTest, CodesAreNearestForTheirScaleAndBeatMinMax) {
  for (const Format& f : kFormats) {
    SCOPED_TRACE(f.name);
    const int64_t n = 7, k = 172;  // 172: stories260K's FFN width, not a multiple of any group
    Tensor w = optest::randn({n, k}, DType::f32, 3, 0.2);
    w.data<float>()[5] = 0;  // a zero in a group
    for (int64_t j = 0; j < k; ++j) w.data<float>()[2 * k + j] = 0.5f;  // a constant row
    const QuantizedWeight q = ops::quantize_weight(w, f.type, f.group, f.symmetric, f.scales);
    q.check("test");
    EXPECT_EQ(q.scales.dtype(), f.scales);
    if (q.mins.defined()) {
      EXPECT_EQ(q.mins.dtype(), f.scales);
    }
    const int64_t group = f.type == QuantType::int8 ? k : f.group;
    EXPECT_EQ(q.group, group);
    // f16 scales are the fitted ones rounded (2^-11 relative): the min/max comparison below
    // then allows 1 % more squared error.
    const double f16 = f.scales == DType::f16 ? 1.0 : 0.0;
    for (int64_t r = 0; r < n; ++r)
      for (int64_t g = 0; g * group < k; ++g) {
        const int64_t k0 = g * group, k1 = std::min(k, (g + 1) * group);
        double lo = 1e9, hi = -1e9, amax = 0;
        for (int64_t j = k0; j < k1; ++j) {
          const double v = w.item({r, j});
          lo = std::min(lo, v), hi = std::max(hi, v), amax = std::max(amax, std::fabs(v));
        }
        const double scale = q.scales.item({r, g});
        if (f.type == QuantType::int8) {
          EXPECT_NEAR(scale, amax / 127, 1e-6 * std::max(1.0, amax) + f16 * 1e-3 * scale);
        }
        // Each code is the nearest one (within the code range) for the group's stored scale.
        const double off = f.symmetric ? 0 : q.mins.item({r, g});
        const int cmin = f.type == QuantType::int8 ? -127 : f.symmetric ? -8 : 0;
        const int cmax = f.type == QuantType::int8 ? 127 : f.symmetric ? 7 : 15;
        double err = 0, minmax_err = 0;
        double mm_step = f.type == QuantType::int8 ? amax / 127 : f.symmetric ? amax / 7 : (hi - lo) / 15;
        double mm_lo = lo;
        if (f16 > 0) {  // the min/max quantiser's scale and min stored as f16 too
          mm_step = f16_to_f32(f32_to_f16(static_cast<float>(mm_step)));
          mm_lo = f16_to_f32(f32_to_f16(static_cast<float>(lo)));
        }
        for (int64_t j = k0; j < k1; ++j) {
          const double v = w.item({r, j}), d = dequant(q, r, j);
          double best = 1e30;
          for (int c = cmin; c <= cmax; ++c) best = std::min(best, std::fabs(v - (scale * c + off)));
          EXPECT_LE(std::fabs(v - d), best + 1e-6) << "row " << r << " col " << j << ": not the nearest code";
          err += (v - d) * (v - d);
          // The plain min/max quantiser, written out here.
          const double base = f.symmetric ? 0 : mm_lo;
          const double c = mm_step > 0 ? std::clamp(std::nearbyint((v - base) / mm_step), double(cmin), double(cmax)) : 0;
          minmax_err += std::pow(v - (mm_step * c + base), 2);
        }
        EXPECT_LE(err, minmax_err * (1 + 1e-5 + f16 * 1e-2) + 1e-12) << "row " << r << " group " << g;
      }
    // dequantize_weight agrees with the formulas, and a constant row comes back exactly.
    const Tensor deq = ops::dequantize_weight(q);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < k; ++j) EXPECT_NEAR(deq.item({r, j}), dequant(q, r, j), 1e-6);
    if (!f.symmetric) {
      for (int64_t j = 0; j < k; ++j) EXPECT_EQ(deq.item({2, j}), 0.5);
    }
  }
}

struct Shape3 {
  int64_t m, k, n;
};
const Shape3 kShapes[] = {{1, 172, 33}, {2, 256, 64}, {3, 100, 65}, {4, 768, 40}, {5, 172, 70},
                          {17, 300, 131}, {1, 1, 3}};

// Exact activations (the kernels may not quantise x) for the comparisons with an exact product.
struct ExactActivations {
  bool prev = ops::linear_q_int8_activations();
  ExactActivations() { ops::set_linear_q_int8_activations(false); }
  ~ExactActivations() { ops::set_linear_q_int8_activations(prev); }
};

TEST_F(QuantTest, LinearQMatchesTheDequantisedProduct) {
  ExactActivations exact;
  uint64_t seed = 10;
  for (const Format& f : kFormats)
    for (const Shape3& s : kShapes)
      for (bool bias : {false, true}) {
        SCOPED_TRACE(::testing::Message() << f.name << " M=" << s.m << " K=" << s.k << " N=" << s.n << " bias=" << bias);
        Tensor x = optest::randn({s.m, s.k}, DType::f32, seed++);
        Tensor w = optest::randn({s.n, s.k}, DType::f32, seed++, 0.1);
        Tensor b = bias ? optest::randn({s.n}, DType::f32, seed++) : Tensor();
        const QuantizedWeight q = ops::quantize_weight(w, f.type, f.group, f.symmetric, f.scales);
        std::vector<double> want(s.m * s.n), scale(s.m * s.n);
        for (int64_t i = 0; i < s.m; ++i)
          for (int64_t j = 0; j < s.n; ++j) {
            double acc = bias ? b.item({j}) : 0, mag = bias ? std::fabs(b.item({j})) : 0;
            for (int64_t p = 0; p < s.k; ++p) {
              acc += x.item({i, p}) * dequant(q, j, p);
              mag += std::fabs(x.item({i, p}) * dequant(q, j, p));
            }
            want[i * s.n + j] = acc;
            scale[i * s.n + j] = mag;
          }
        optest::expect_near(ops::linear_q(x, q, b), want, 1e-6, 1e-5, scale);
        // The reference kernel (the fallback) too.
        Tensor y = Tensor::empty({s.m, s.n}, DType::f32);
        ops::QLinearArgs a{x.data<float>(), q.data.raw_data(), q.scales.raw_data(),
                           q.mins.defined() ? q.mins.raw_data() : nullptr, bias ? b.data<float>() : nullptr,
                           y.data<float>(), s.m, s.k, s.n, q.group, q.data.dtype(), false, q.scales.dtype()};
        ops::linear_q_reference(a);
        optest::expect_near(y, want, 1e-6, 1e-5, scale);
      }
}

// With int8 activations allowed (the default), a kernel may quantise x per block of 32
// (scale max|x| / 127, round to nearest: the VNNI int4 GEMV and the int8/int4 GEMM do at
// avx512_bf16 and above). The result then stays within the exact product's rounding plus
// Σ_k |w_k| · |x_k − x̂_k|, the activation rounding error computed here; kernels that keep x exact
// meet it too. The GEMM shapes (M > 4) have row tails (M % 6) and column tails (N % 32).
TEST_F(QuantTest, Int8ActivationsStayWithinTheirRoundingError) {
  ASSERT_TRUE(ops::linear_q_int8_activations()) << "on by default";
  autograd::NoGradGuard inference;  // (under grad mode x stays exact)
  uint64_t seed = 50;
  for (const Format& f : kFormats)
    for (const Shape3& s : {Shape3{1, 768, 40}, Shape3{3, 256, 33}, Shape3{4, 128, 17}, Shape3{2, 192, 9},
                            Shape3{1, 96, 11}, Shape3{2, 100, 5},  // K: an odd count of 32-blocks; not whole blocks
                            Shape3{7, 256, 70}, Shape3{13, 96, 33}, Shape3{6, 2048, 32}, Shape3{12, 128, 5},
                            Shape3{5, 100, 40}}) {
      SCOPED_TRACE(::testing::Message() << f.name << " M=" << s.m << " K=" << s.k << " N=" << s.n);
      Tensor x = optest::randn({s.m, s.k}, DType::f32, seed++);
      const QuantizedWeight q = ops::quantize_weight(optest::randn({s.n, s.k}, DType::f32, seed++, 0.1), f.type,
                                                     f.group, f.symmetric, f.scales);
      const Tensor b = optest::randn({s.n}, DType::f32, seed++);
      std::vector<double> want(s.m * s.n), bound(s.m * s.n);
      for (int64_t i = 0; i < s.m; ++i) {
        std::vector<double> xr(s.k);  // x rounded to int8 per block of 32
        for (int64_t b = 0; b * 32 < s.k; ++b) {
          double amax = 0;
          for (int64_t p = b * 32; p < std::min(s.k, b * 32 + 32); ++p) amax = std::max(amax, std::fabs(x.item({i, p})));
          const double sc = static_cast<float>(amax) / 127.0f;
          for (int64_t p = b * 32; p < std::min(s.k, b * 32 + 32); ++p)
            xr[p] = sc > 0 ? sc * std::nearbyint(x.item({i, p}) / sc) : 0;
        }
        for (int64_t j = 0; j < s.n; ++j) {
          double acc = b.item({j}), mag = std::fabs(acc), rounding = 0;
          for (int64_t p = 0; p < s.k; ++p) {
            const double w = dequant(q, j, p), v = x.item({i, p});
            acc += v * w;
            mag += std::fabs(v * w);
            rounding += std::fabs(w) * std::fabs(v - xr[p]);
          }
          want[i * s.n + j] = acc;
          bound[i * s.n + j] = 1e-5 * mag + 1.01 * rounding + 1e-6;
        }
      }
      const std::vector<double> got = optest::doubles(ops::linear_q(x, q, b));
      for (size_t e = 0; e < got.size(); ++e)
        ASSERT_LE(std::fabs(got[e] - want[e]), bound[e]) << "element " << e;
    }
}

TEST_F(QuantTest, BackwardGivesDxThroughTheFrozenWeight) {
  ExactActivations exact;
  for (const Format& f : {kFormats[0], kFormats[2], kFormats[7]}) {
    SCOPED_TRACE(f.name);
    Tensor x = optest::randn({3, 172}, DType::f32, 5);
    x.set_requires_grad(true);
    Tensor b = optest::randn({9}, DType::f32, 6);
    b.set_requires_grad(true);
    const QuantizedWeight q =
        ops::quantize_weight(optest::randn({9, 172}, DType::f32, 7, 0.1), f.type, 32, f.symmetric, f.scales);
    Tensor dy = optest::randn({3, 9}, DType::f32, 8);
    Tensor y = ops::linear_q(x, q, b);
    autograd::backward(y, dy);
    std::vector<double> dx(3 * 172, 0), db(9, 0);
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 9; ++j) {
        db[j] += dy.item({i, j});
        for (int64_t p = 0; p < 172; ++p) dx[i * 172 + p] += dy.item({i, j}) * dequant(q, j, p);
      }
    optest::expect_near(x.grad(), dx, 1e-5, 1e-5);
    optest::expect_near(b.grad(), db, 1e-5, 1e-5);
  }
}

TEST_F(QuantTest, BadInputsAreClearErrors) {
  Tensor w = optest::randn({4, 8}, DType::f32, 1);
  EXPECT_THROW(ops::quantize_weight(w, QuantType::int4, 0, true), ConfigError);
  EXPECT_THROW(ops::quant_type_from_name("weight_only_int3"), ConfigError);
  QuantizedWeight q = ops::quantize_weight(w, QuantType::int4, 4, false);
  EXPECT_THROW(ops::linear_q(optest::randn({2, 9}, DType::f32, 2), q), ShapeError);
  q.mins = Tensor();
  EXPECT_THROW(q.check("layer 0 q_proj"), ShapeError);
  // Mins in another dtype than the scales.
  q = ops::quantize_weight(w, QuantType::int4, 4, false, DType::f16);
  q.mins = q.mins.to(DType::f32);
  EXPECT_THROW(q.check("layer 0 q_proj"), ShapeError);
  // A scale beyond f16's range names the layer and the way out.
  Tensor big = Tensor::from_vector(std::vector<float>(64, 1e6f), {2, 32});
  try {
    ops::quantize_weight(big, QuantType::int4, 32, true, DType::f16, "layers.3.mlp.down_proj");
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("layers.3.mlp.down_proj"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--scale-dtype f32"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(ops::quantize_weight(big, QuantType::int4, 32, true, DType::f32));
  EXPECT_THROW(ops::scale_dtype_from_name("bf16"), ConfigError);
  EXPECT_THROW(ops::quantize_weight(w, QuantType::int4, 4, false, DType::bf16), DTypeError);
  EXPECT_EQ(ops::quant_type_from_name("weight_only_int8"), QuantType::int8);
}

}  // namespace
}  // namespace unillm
