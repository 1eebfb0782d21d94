// Tensor views, copies and dtype conversions against hand-computed values.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "support/expect.h"

namespace unillm {
namespace {

class TensorTest : public ::testing::Test {
 protected:
  void SetUp() override { testing::init_cpu(); }
};

// Storage::refill / release (ZeRO-3's gathered parameters): views made before keep reading the
// storage's current memory; released memory goes back to the allocator.
TEST_F(TensorTest, StorageMemoryComesAndGoesUnderItsViews) {
  Tensor t = Tensor::zeros({4, 256}, DType::f32);
  Tensor row = t.slice(0, 2, 3);
  const auto& storage = t.storage();
  Allocator& a = backend_for(Device{}).allocator(0);
  const size_t before = a.bytes_in_use();
  storage->release();
  EXPECT_FALSE(storage->holds_memory());
  EXPECT_EQ(storage->data(), nullptr);
  EXPECT_EQ(a.bytes_in_use(), before - 4 * 256 * 4);
  storage->refill();
  EXPECT_TRUE(storage->holds_memory());
  EXPECT_EQ(a.bytes_in_use(), before);
  t.fill(3.0);
  EXPECT_EQ(row.item({0, 5}), 3.0);  // the old view reads the new memory
  EXPECT_EQ(row.raw_data(), static_cast<char*>(storage->data()) + 2 * 256 * 4);
}

TEST_F(TensorTest, ViewsShareStorageAndIndexCorrectly) {
  Tensor t = Tensor::from_vector({0, 1, 2, 3, 4, 5}, {2, 3});
  Tensor tt = t.transpose(0, 1);  // [3, 2]
  EXPECT_FALSE(tt.is_contiguous());
  EXPECT_EQ(tt.item({2, 1}), 5);
  EXPECT_EQ(tt.item({1, 0}), 1);
  Tensor c = tt.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(c.to_float_vector(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  Tensor s = t.slice(1, 1, 3);  // [[1,2],[4,5]]
  EXPECT_EQ(s.contiguous().to_float_vector(), (std::vector<float>{1, 2, 4, 5}));
  EXPECT_EQ(t.select(0, 1).to_float_vector(), (std::vector<float>{3, 4, 5}));
  EXPECT_EQ(t.view({3, -1}).size(1), 2);
  EXPECT_THROW(tt.view({6}), ShapeError);
  EXPECT_THROW(t.slice(1, 2, 4), ShapeError);
}

TEST_F(TensorTest, DtypeRoundTrips) {
  Tensor t = Tensor::from_vector({1.0f, -2.5f, 3.1415926f, 65504.0f, 1e-7f}, {5});
  Tensor b = t.to(DType::bf16).to(DType::f32);
  EXPECT_EQ(b.item({0}), 1.0);
  EXPECT_EQ(b.item({1}), -2.5);
  EXPECT_NEAR(b.item({2}), 3.1415926, 0.01);
  Tensor h = t.to(DType::f16).to(DType::f32);
  EXPECT_EQ(h.item({3}), 65504.0);
  EXPECT_NEAR(h.item({2}), 3.1415926, 0.002);
  EXPECT_EQ(h.item({4}), 0x1.0p-23);  // 1e-7 is subnormal in f16: nearest is 2 * 2^-24
  EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3f80);  // tie rounds to even
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_THROW(dtype_from_name("F8_E4M3"), DTypeError);
  EXPECT_EQ(dtype_from_name("BF16"), DType::bf16);
}

TEST_F(TensorTest, FillAndCopyConvert) {
  Tensor t = Tensor::zeros({2, 2}, DType::f64);
  t.slice(0, 1, 2).fill(7);
  EXPECT_EQ(t.to_float_vector(), (std::vector<float>{0, 0, 7, 7}));
  Tensor f = Tensor::empty({2, 2}, DType::f32);
  f.copy_from(t.transpose(0, 1));
  EXPECT_EQ(f.to_float_vector(), (std::vector<float>{0, 7, 0, 7}));
}

}  // namespace
}  // namespace unillm

namespace unillm {
namespace {

// all_finite_f32 against std::isfinite, for every position of one bad value in rows whose
// length is not a multiple of the vector width.
TEST(AllFinite, FindsEveryNanAndInfAnywhere) {
  const float bad[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                       -std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::quiet_NaN()};
  for (size_t n : {1u, 3u, 4u, 7u, 33u}) {
    std::vector<float> v(n, 1.5f);
    v[0] = std::numeric_limits<float>::max();
    if (n > 1) v[1] = std::numeric_limits<float>::denorm_min();
    if (n > 2) v[2] = -0.0f;
    EXPECT_TRUE(all_finite_f32(v.data(), n)) << n;
    for (size_t at = 0; at < n; ++at)
      for (float b : bad) {
        std::vector<float> w = v;
        w[at] = b;
        EXPECT_FALSE(all_finite_f32(w.data(), n)) << n << " at " << at << " value " << b;
      }
  }
  EXPECT_TRUE(all_finite_f32(nullptr, 0));
}

}  // namespace
}  // namespace unillm
