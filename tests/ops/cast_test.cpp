// ops::cast: the CPU kernel rounds f32 to bf16/f16 bit for bit as the scalar conversions of
// core/dtype.h (round to nearest even, ties both ways, NaN kept NaN, f16 overflow to inf,
// subnormals), converts back exactly, and handles lengths that are not a multiple of the vector
// width across threads.
#include "ops/cast.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/rng.h"
#include "support/expect.h"

namespace unillm::ops {
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Random values over many magnitudes plus the edge cases.
std::vector<float> test_values(size_t n) {
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.5f, std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::denorm_min(), 65504.0f, 65520.0f, 1e-8f, 6e-5f,
                          from_bits(0x3f808000u), from_bits(0x3f818000u),  // bf16 ties: to even down/up
                          from_bits(0x3f801000u), from_bits(0x3f803000u)};  // f16 ties
  Rng rng(3);
  while (v.size() < n) v.push_back(static_cast<float>(rng.normal() * std::pow(10.0, static_cast<int>(rng.next_u64() % 13) - 6)));
  return v;
}

uint16_t bits16(const Tensor& t, int64_t i) { return static_cast<const uint16_t*>(t.raw_data())[i]; }

TEST(Cast, RoundsAsTheScalarConversionAndBack) {
  testing::init_cpu();
  for (size_t n : {size_t{16}, size_t{37}, size_t{100003}}) {
    auto v = test_values(n);
    Tensor x = Tensor::from_vector(v, {static_cast<int64_t>(n)});
    Tensor b = cast(x, DType::bf16), h = cast(x, DType::f16);
    ASSERT_EQ(b.dtype(), DType::bf16);
    ASSERT_EQ(h.dtype(), DType::f16);
    int bad = 0;
    for (size_t i = 0; i < n && bad < 5; ++i) {
      const auto k = static_cast<int64_t>(i);
      if (bits16(b, k) != f32_to_bf16(v[i]) || bits16(h, k) != f32_to_f16(v[i])) {
        ADD_FAILURE() << "element " << i << " = " << v[i] << ": bf16 " << bits16(b, k) << " want "
                      << f32_to_bf16(v[i]) << ", f16 " << bits16(h, k) << " want " << f32_to_f16(v[i]);
        ++bad;
      }
    }
    Tensor bb = cast(b, DType::f32), hh = cast(h, DType::f32);
    for (size_t i = 0; i < n; ++i) {
      const auto k = static_cast<int64_t>(i);
      ASSERT_EQ(bb.data<float>()[k], bf16_to_f32(bits16(b, k))) << i;
      const float want = f16_to_f32(bits16(h, k));
      if (std::isnan(want))
        ASSERT_TRUE(std::isnan(hh.data<float>()[k])) << i;
      else
        ASSERT_EQ(hh.data<float>()[k], want) << i;
    }
  }
}

TEST(Cast, NanStaysNanAndOverflowIsInf) {
  testing::init_cpu();
  std::vector<float> v(9, std::numeric_limits<float>::quiet_NaN());
  v[8] = 1e6f;
  Tensor x = Tensor::from_vector(v, {9});
  Tensor b = cast(cast(x, DType::bf16), DType::f32), h = cast(cast(x, DType::f16), DType::f32);
  for (int i = 0; i < 8; ++i) {
    EXPECT_TRUE(std::isnan(b.data<float>()[i])) << i;
    EXPECT_TRUE(std::isnan(h.data<float>()[i])) << i;
  }
  EXPECT_EQ(b.data<float>()[8], 999424.0f);  // bf16 keeps f32's range
  EXPECT_TRUE(std::isinf(h.data<float>()[8]));  // f16 does not (max 65504)
}

TEST(Cast, SameDtypeIsTheTensorAndStridedInputIsCopied) {
  testing::init_cpu();
  Tensor x = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(cast(x, DType::f32).raw_data(), x.raw_data());
  Tensor t = x.transpose(0, 1);  // [3, 2], not contiguous
  Tensor b = cast(t, DType::bf16);
  EXPECT_EQ(b.shape(), (Shape{3, 2}));
  EXPECT_EQ(cast(b, DType::f32).data<float>()[1], 4.0f);
}

}  // namespace
}  // namespace unillm::ops
