// bitsandbytes nf4/fp4 (ops/quant_4bit.h): the tables against values written out here, the
// codes against a nearest-level search written again here over the flattened weight (blocks
// spanning rows, an odd element count, a zero block), double quantisation's decoded scales, and
// linear_q's nf4/fp4 kernels (forward, dx through panels, bias grad) against a double-precision
// product with the dequantised weight; lora_delta over a quantised base against lora_linear over
// the same weight dense (QLoRA's forward and gradients).
#include <algorithm>
#include <cmath>

#include "autograd/engine.h"
#include "op_test_util.h"
#include "ops/elementwise.h"
#include "ops/lora_linear.h"
#include "ops/quant.h"
#include "ops/quant_4bit.h"

namespace unillm {
namespace {

using ops::QuantizedWeight;
using ops::QuantType;

class Quant4bitTest : public optest::OpTest {};

// The code of flat element i: bnb packs the even element in the high nibble.
int code_at(const QuantizedWeight& q, int64_t i) {
  const auto byte = static_cast<int>(q.data.item({i / 2}));
  return i % 2 ? byte & 15 : byte >> 4;
}

TEST_F(Quant4bitTest, TablesAreBitsandbytes) {
  const auto& nf4 = ops::levels_4bit(QuantType::nf4);
  EXPECT_EQ(nf4[0], -1.0f);
  EXPECT_EQ(nf4[7], 0.0f);
  EXPECT_EQ(nf4[15], 1.0f);
  EXPECT_FLOAT_EQ(nf4[8], 0.07958029955625534f);
  for (int i = 1; i < 16; ++i) EXPECT_LT(nf4[i - 1], nf4[i]);
  // fp4: sign bit 8; magnitudes 0, 1/192, 2/3, 1, 1/3, 1/2, 1/6, 1/4.
  const double mags[8] = {0, 1.0 / 192, 2.0 / 3, 1, 1.0 / 3, 0.5, 1.0 / 6, 0.25};
  const auto& fp4 = ops::levels_4bit(QuantType::fp4);
  for (int i = 0; i < 8; ++i) {
    EXPECT_NEAR(fp4[i], mags[i], 1e-7);
    EXPECT_NEAR(fp4[i + 8], -mags[i], 1e-7);
  }
  const auto& dm = ops::dynamic_map();
  EXPECT_TRUE(std::is_sorted(dm.begin(), dm.end()));
  EXPECT_EQ(dm[255], 1.0f);
  EXPECT_NE(std::find(dm.begin(), dm.end(), 0.0f), dm.end());
  EXPECT_NEAR(dm[0], -0.99297f, 1e-4);  // −(0.1 + 0.9·(63.5/64)) , the largest negative mean
  EXPECT_EQ(dm[127], 0.0f);  // 127 negative values, 0, 127 positive ones and 1
  EXPECT_GT(dm[128], 0.0f);
}

TEST_F(Quant4bitTest, CodesAreTheNearestLevelOfEachFlatBlock) {
  for (QuantType t : {QuantType::nf4, QuantType::fp4})
    for (bool dq : {false, true}) {
      SCOPED_TRACE(std::string(ops::quant_type_name(t)) + (dq ? " double" : ""));
      const int64_t n = 7, k = 37;  // 259 values: blocks span rows, odd count pads a code
      Tensor w = optest::randn({n, k}, DType::f32, 11, 0.3);
      for (int64_t i = 64; i < 128; ++i) w.data<float>()[i] = 0;  // block 1 all zeros
      const QuantizedWeight q = ops::quantize_4bit(w, t, {64, dq});
      q.check("test");
      EXPECT_EQ(q.data.numel(), 130);
      const Tensor absmax = ops::block_absmax(q);
      ASSERT_EQ(absmax.numel(), 5);
      const auto& lv = ops::levels_4bit(t);
      for (int64_t b = 0; b < 5; ++b) {
        float amax = 0;
        for (int64_t i = b * 64; i < std::min<int64_t>(n * k, (b + 1) * 64); ++i)
          amax = std::max(amax, std::fabs(w.data<float>()[i]));
        if (!dq) EXPECT_EQ(absmax.data<float>()[b], amax);
        else EXPECT_NEAR(absmax.data<float>()[b], amax, 0.02 * amax + 0.01);  // 8-bit dynamic codes
        for (int64_t i = b * 64; i < std::min<int64_t>(n * k, (b + 1) * 64); ++i) {
          const float s = amax == 0 ? 0.0f : std::clamp(w.data<float>()[i] * (1.0f / amax), -1.0f, 1.0f);
          int best = 0;
          for (int c = 1; c < 16; ++c)
            if (std::fabs(s - lv[c]) < std::fabs(s - lv[best])) best = c;
          EXPECT_EQ(code_at(q, i), best) << "element " << i;
        }
      }
      // The pad nibble is the code of 0.0; the dequantised weight is level · decoded absmax.
      EXPECT_EQ(lv[code_at(q, n * k)], 0.0f);
      const Tensor d = ops::dequantize_weight(q);
      for (int64_t i = 0; i < n * k; ++i)
        ASSERT_EQ(d.data<float>()[i], lv[code_at(q, i)] * absmax.data<float>()[i / 64]);
    }
}

TEST_F(Quant4bitTest, DoubleQuantisationKeepsTheScalesClose) {
  // 600 blocks: three 256-blocks of absmaxes, the last one short.
  const QuantizedWeight q = ops::quantize_4bit(optest::randn({300, 128}, DType::f32, 3, 0.05), QuantType::nf4, {});
  const QuantizedWeight p = ops::quantize_4bit(optest::randn({300, 128}, DType::f32, 3, 0.05), QuantType::nf4, {64, false});
  ASSERT_TRUE(q.absmax_codes.defined());
  EXPECT_EQ(q.scales.numel(), 3);
  EXPECT_LT(q.bytes(), p.bytes());
  const Tensor a = ops::block_absmax(q), b = ops::block_absmax(p);
  double mean = 0;
  for (int64_t i = 0; i < 600; ++i) mean += b.data<float>()[i] / 600.0;
  EXPECT_NEAR(q.absmax_offset, mean, 1e-6);
  for (int64_t i = 0; i < 600; ++i) EXPECT_NEAR(a.data<float>()[i], b.data<float>()[i], 0.01 * b.data<float>()[i]);
}

// y = x · Wᵀ + b and dx = dy · W, db = Σ dy, with W dequantised, in double.
void check_linear(const QuantizedWeight& q, int64_t m, bool bias) {
  const int64_t n = q.n, k = q.k;
  const Tensor wd = ops::dequantize_weight(q);
  Tensor x = optest::randn({m, k}, DType::f32, 21);
  Tensor b = bias ? optest::randn({n}, DType::f32, 22) : Tensor();
  x.set_requires_grad(true);
  if (bias) b.set_requires_grad(true);
  Tensor y = ops::linear_q(x, q, b);
  std::vector<double> want(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = bias ? b.data<float>()[j] : 0.0;
      for (int64_t p = 0; p < k; ++p) s += double(x.data<float>()[i * k + p]) * wd.data<float>()[j * k + p];
      want[i * n + j] = s;
    }
  optest::expect_near(y, want, 1e-4, 1e-4);
  Tensor dy = optest::randn({m, n}, DType::f32, 23);
  autograd::backward(y, dy);
  std::vector<double> dx(static_cast<size_t>(m * k), 0), db(static_cast<size_t>(n), 0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      db[j] += dy.data<float>()[i * n + j];
      for (int64_t p = 0; p < k; ++p) dx[i * k + p] += double(dy.data<float>()[i * n + j]) * wd.data<float>()[j * k + p];
    }
  optest::expect_near(x.grad(), dx, 1e-4, 1e-4);
  if (bias) optest::expect_near(b.grad(), db, 1e-4, 1e-4);
}

TEST_F(Quant4bitTest, LinearMatchesTheDequantisedProductBothWays) {
  for (QuantType t : {QuantType::nf4, QuantType::fp4}) {
    SCOPED_TRACE(ops::quant_type_name(t));
    check_linear(ops::quantize_4bit(optest::randn({9, 37}, DType::f32, 5, 0.1), t, {}), 3, true);
    check_linear(ops::quantize_4bit(optest::randn({19, 64}, DType::f32, 6, 0.1), t, {64, false}), 17, false);
  }
}

// Several panels need > 2M weights: a suite of its own, in the emulated-ISA run's heavy list.
class Quant4bitPanelsTest : public optest::OpTest {};

TEST_F(Quant4bitPanelsTest, ForwardAndDxAccumulateOverPanels) {
  // Two panels (half_panel_rows gives 256 rows at K = 8192).
  check_linear(ops::quantize_4bit(optest::randn({300, 8192}, DType::f32, 7, 0.02), QuantType::nf4, {}), 2, true);
  // QLoRA's 8-bit base: dx through two panels of dequantised rows as well.
  check_linear(ops::quantize_weight(optest::randn({300, 8192}, DType::f32, 12, 0.02), QuantType::int8, 0, true), 5, true);
}

TEST_F(Quant4bitTest, KernelAgreesWithItsReference) {
  const QuantizedWeight q = ops::quantize_4bit(optest::randn({70, 96}, DType::f32, 8, 0.1), QuantType::fp4, {});
  const Tensor absmax = ops::block_absmax(q);
  Tensor x = optest::randn({5, 96}, DType::f32, 9), dy = optest::randn({5, 70}, DType::f32, 10);
  Tensor y = ops::linear_q(x, q), y_ref = Tensor::empty({5, 70}, DType::f32);
  ops::Linear4bitArgs a{x.data<float>(), static_cast<const uint8_t*>(q.data.raw_data()), absmax.data<float>(),
                        ops::levels_4bit(q.type).data(), nullptr, y_ref.data<float>(), 5, 96, 70, 64, false};
  ops::linear_4bit_reference(a);
  optest::expect_near(y, optest::doubles(y_ref), 1e-5, 1e-5);
}

TEST_F(Quant4bitTest, LoraDeltaOverAQuantisedBaseMatchesLoraLinear) {
  const int64_t m = 6, k = 40, n = 24, r = 4;
  const QuantizedWeight q = ops::quantize_4bit(optest::randn({n, k}, DType::f32, 31, 0.2), QuantType::nf4, {});
  const Tensor wd = ops::dequantize_weight(q);
  auto run = [&](bool quantised, Tensor& dx, Tensor& da, Tensor& dbb) {
    Tensor x = optest::randn({m, k}, DType::f32, 32);
    Tensor a = optest::randn({2 * r, k}, DType::f32, 33, 0.2), b = optest::randn({16, r}, DType::f32, 34, 0.2);
    for (Tensor* t : {&x, &a, &b}) t->set_requires_grad(true);
    ops::LoraAdapterInput ad{a, b, {{0, 8, 0}, {16, 8, 8}}, 0.5};
    Tensor y = quantised ? ops::add(ops::linear_q(x, q), ops::lora_delta(x, n, {ad}))
                         : ops::lora_linear(x, wd, Tensor(), {ad});
    autograd::backward(y, optest::randn({m, n}, DType::f32, 35));
    dx = x.grad(), da = a.grad(), dbb = b.grad();
    return y.detach();
  };
  Tensor dx1, da1, db1, dx2, da2, db2;
  const Tensor y1 = run(true, dx1, da1, db1), y2 = run(false, dx2, da2, db2);
  optest::expect_near(y1, optest::doubles(y2), 1e-5, 1e-5);
  optest::expect_near(dx1, optest::doubles(dx2), 1e-5, 1e-5);
  optest::expect_near(da1, optest::doubles(da2), 1e-5, 1e-5);
  optest::expect_near(db1, optest::doubles(db2), 1e-5, 1e-5);
}

TEST_F(Quant4bitTest, BadInputsAreClearErrors) {
  Tensor w = optest::randn({4, 8}, DType::f32, 1);
  EXPECT_THROW(ops::quantize_4bit(w, QuantType::int4, {}), ConfigError);
  EXPECT_THROW(ops::quantize_4bit(w, QuantType::nf4, {0, true}), ConfigError);
  QuantizedWeight q = ops::quantize_4bit(w, QuantType::nf4, {});
  EXPECT_THROW(ops::linear_q(optest::randn({2, 9}, DType::f32, 2), q), ShapeError);
  QuantizedWeight bad = q;
  bad.scales = Tensor::zeros({3}, DType::f32);
  EXPECT_THROW(bad.check("layer 0 q_proj"), ShapeError);
  bad = q;
  bad.absmax_codes = Tensor::zeros({2}, DType::i8);
  EXPECT_THROW(bad.check("layer 0 q_proj"), ShapeError);
  EXPECT_EQ(std::string(ops::quant_type_name(QuantType::fp4)), "fp4");
}

}  // namespace
}  // namespace unillm
