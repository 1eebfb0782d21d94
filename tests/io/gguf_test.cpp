// GGUF container and ggml formats: bit-exact round trips of F32/F16/BF16 and every metadata
// type; Q8_0/Q4_0 against naive quantisers written here from the format's definition; the K-quant
// dequantisers against hand-built blocks; truncated and corrupt files and unsupported types.
#include "io/gguf.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "core/dtype.h"
#include "io/json_file.h"
#include "support/expect.h"

namespace unillm::io {
namespace {

namespace fs = std::filesystem;

class GgufTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::init_cpu();
    dir_ = fs::temp_directory_path() /
           ("unillm_gguf_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& f) const { return (dir_ / f).string(); }
  fs::path dir_;
};

std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

GgufTensorOut raw_tensor(const std::string& name, Shape shape, GgmlType type, std::string bytes) {
  return {name, std::move(shape), type, [bytes]() { return bytes; }};
}

std::string f32_bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

// ---- round trips ----

TEST_F(GgufTest, RoundTripIsBitExactForFloatTypesAndMetadata) {
  const std::vector<float> a = random_floats(6 * 40, 1);
  std::string h16, b16;  // random f16/bf16 bit patterns (finite), stored as they are
  std::mt19937 rng(2);
  for (int i = 0; i < 3 * 33; ++i) {
    uint16_t x = static_cast<uint16_t>(rng()) & 0xBBFF;  // clears exponent bits: always finite
    h16.append(reinterpret_cast<const char*>(&x), 2);
    b16.append(reinterpret_cast<const char*>(&x), 2);
  }
  GgufMetadata md = {
      {"general.architecture", GgufValue::string("llama")},
      {"k.u32", GgufValue::u32(4000000000u)},
      {"k.i32", GgufValue::i32(-7)},
      {"k.u64", GgufValue::u64(~uint64_t{0})},
      {"k.f32", GgufValue::f32(1e-5f)},
      {"k.bool", GgufValue::boolean(true)},
      {"k.strings", GgufValue::strings_array({"a", "", "▁héllo"})},
      {"k.floats", GgufValue::f32_array({0.5, -1e30})},
      {"k.ints", GgufValue::i32_array({1, -2, 3})},
  };
  write_gguf(
      path("m.gguf"), md,
      {raw_tensor("a", {6, 40}, GgmlType::kF32, f32_bytes(a)),
       raw_tensor("h", {3, 33}, GgmlType::kF16, h16), raw_tensor("b", {99}, GgmlType::kBF16, b16)});
  auto f = GgufFile::open(path("m.gguf"));
  EXPECT_EQ(f->header().version, 3u);
  EXPECT_EQ(f->get_string("general.architecture"), "llama");
  EXPECT_EQ(f->get_int("k.u32"), 4000000000);
  EXPECT_EQ(f->get_int("k.i32"), -7);
  EXPECT_EQ(static_cast<uint64_t>(f->get_int("k.u64")), ~uint64_t{0});
  EXPECT_EQ(static_cast<float>(f->get_float("k.f32")), 1e-5f);
  EXPECT_EQ(f->get_int("k.bool"), 1);
  EXPECT_EQ(f->find("k.strings")->strings, (std::vector<std::string>{"a", "", "▁héllo"}));
  EXPECT_EQ(f->find("k.floats")->floats, (std::vector<double>{0.5, static_cast<float>(-1e30)}));
  EXPECT_EQ(f->find("k.ints")->ints, (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(f->find("missing"), nullptr);
  ASSERT_EQ(f->tensors().size(), 3u);
  const auto& ta = f->tensor("a");
  EXPECT_EQ(ta.shape, (Shape{6, 40}));
  EXPECT_EQ(ta.offset % 32, 0u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(f->data(ta)), ta.nbytes), f32_bytes(a));
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(f->data(f->tensor("h"))), h16.size()), h16);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(f->data(f->tensor("b"))), b16.size()), b16);
  EXPECT_EQ(f->to_f32("a").to_float_vector(), a);
  // to_f32 of f16/bf16 is the exact widening.
  const std::vector<float> h = f->to_f32("h").to_float_vector();
  const std::vector<float> b = f->to_f32("b").to_float_vector();
  for (size_t i = 0; i < h.size(); ++i) {
    uint16_t x;
    std::memcpy(&x, h16.data() + 2 * i, 2);
    EXPECT_EQ(h[i], f16_to_f32(x)) << i;
    EXPECT_EQ(b[i], bf16_to_f32(x)) << i;
  }
}

TEST_F(GgufTest, CustomAlignmentIsWrittenAndHonoured) {
  write_gguf(path("m.gguf"), {},
             {raw_tensor("x", {3}, GgmlType::kF32, f32_bytes({1, 2, 3})),
              raw_tensor("y", {5}, GgmlType::kF32, f32_bytes({4, 5, 6, 7, 8}))},
             64);
  auto f = GgufFile::open(path("m.gguf"));
  EXPECT_EQ(f->header().alignment, 64u);
  EXPECT_EQ(f->get_int("general.alignment"), 64);
  EXPECT_EQ(f->header().data_offset % 64, 0u);
  EXPECT_EQ(f->tensor("y").offset, 64u);
  EXPECT_EQ(f->to_f32("y").to_float_vector(), (std::vector<float>{4, 5, 6, 7, 8}));
}

TEST_F(GgufTest, WriterRefusesWrongByteCountsAndDuplicates) {
  testing::expect_throw_with<IoError>(
      [&] {
        write_gguf(path("m.gguf"), {},
                   {raw_tensor("x", {4}, GgmlType::kF32, std::string(12, '\0'))});
      },
      "tensor 'x' gave 12 bytes, expected 16");
  testing::expect_throw_with<IoError>(
      [&] {
        write_gguf(path("m.gguf"), {},
                   {raw_tensor("x", {1}, GgmlType::kF32, std::string(4, '\0')),
                    raw_tensor("x", {1}, GgmlType::kF32, std::string(4, '\0'))});
      },
      "'x' given twice");
  testing::expect_throw_with<IoError>(
      [&] {
        write_gguf(path("m.gguf"), {}, {raw_tensor("q", {2, 40}, GgmlType::kQ8_0, "")});
      },
      "tensor 'q'");
  EXPECT_FALSE(fs::exists(path("m.gguf")));
}

// ---- Q8_0 / Q4_0 against naive quantisers ----

// ggml's definitions, written out per element.
std::string naive_q8_0(const std::vector<float>& x) {
  std::string out;
  for (size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
    const float d = amax / 127.0f;
    const uint16_t dh = f32_to_f16(d);
    out.append(reinterpret_cast<const char*>(&dh), 2);
    for (int j = 0; j < 32; ++j) {
      const float v = d == 0.0f ? 0.0f : x[b * 32 + j] * (1.0f / d);
      out.push_back(static_cast<char>(static_cast<int>(std::round(v))));
    }
  }
  return out;
}

std::string naive_q4_0(const std::vector<float>& x) {
  std::string out;
  for (size_t b = 0; b < x.size() / 32; ++b) {
    const float* v = x.data() + b * 32;
    int at = 0;
    for (int j = 1; j < 32; ++j)
      if (std::fabs(v[j]) > std::fabs(v[at])) at = j;
    const float d = v[at] / -8.0f;
    const uint16_t dh = f32_to_f16(d);
    out.append(reinterpret_cast<const char*>(&dh), 2);
    int codes[32];
    for (int j = 0; j < 32; ++j) {
      const float q = d == 0.0f ? 8.5f : v[j] * (1.0f / d) + 8.5f;
      codes[j] = std::min(15, static_cast<int>(q));
    }
    for (int j = 0; j < 16; ++j) out.push_back(static_cast<char>(codes[j] | (codes[j + 16] << 4)));
  }
  return out;
}

std::vector<float> quant_input() {
  std::vector<float> x = random_floats(32 * 12, 7, 0.3f);
  std::fill(x.begin() + 32, x.begin() + 64, 0.0f);  // an all-zero block: d = 0
  x[64 + 5] = -2.0f;                                // a negative maximum
  x[96 + 3] = 1.5f, x[96 + 9] = -1.5f;              // a tie in magnitude: the first one wins
  for (int j = 0; j < 32; ++j) x[128 + j] = static_cast<float>(j - 16) / 8.0f;  // exact codes
  return x;
}

std::string quantize(GgmlType t, const std::vector<float>& x) {
  std::string out(ggml_row_bytes(t, static_cast<int64_t>(x.size())), '\0');
  quantize_row(t, x.data(), reinterpret_cast<uint8_t*>(out.data()), static_cast<int64_t>(x.size()));
  return out;
}

std::vector<float> dequantize(GgmlType t, const std::string& bytes, size_t n) {
  std::vector<float> y(n);
  dequantize_row(static_cast<uint32_t>(t), reinterpret_cast<const uint8_t*>(bytes.data()), y.data(),
                 static_cast<int64_t>(n));
  return y;
}

TEST(GgufQuants, Q8_0MatchesTheNaiveQuantiserAndDequantises) {
  const std::vector<float> x = quant_input();
  const std::string q = quantize(GgmlType::kQ8_0, x);
  ASSERT_EQ(q.size(), x.size() / 32 * 34);
  EXPECT_EQ(q, naive_q8_0(x));
  const std::vector<float> y = dequantize(GgmlType::kQ8_0, q, x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const size_t b = i / 32;
    uint16_t dh;
    std::memcpy(&dh, q.data() + b * 34, 2);
    EXPECT_EQ(y[i],
              f16_to_f32(dh) * static_cast<float>(static_cast<int8_t>(q[b * 34 + 2 + i % 32])))
        << i;
    EXPECT_NEAR(y[i], x[i], f16_to_f32(dh) * 0.5f + 1e-3f * std::fabs(x[i])) << i;
  }
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[32 + j], 0.0f);
}

TEST(GgufQuants, Q4_0MatchesTheNaiveQuantiserAndDequantises) {
  const std::vector<float> x = quant_input();
  const std::string q = quantize(GgmlType::kQ4_0, x);
  ASSERT_EQ(q.size(), x.size() / 32 * 18);
  EXPECT_EQ(q, naive_q4_0(x));
  const std::vector<float> y = dequantize(GgmlType::kQ4_0, q, x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const size_t b = i / 32, j = i % 32;
    uint16_t dh;
    std::memcpy(&dh, q.data() + b * 18, 2);
    const auto byte = static_cast<uint8_t>(q[b * 18 + 2 + j % 16]);
    const int code = j < 16 ? byte & 0xF : byte >> 4;
    EXPECT_EQ(y[i], f16_to_f32(dh) * static_cast<float>(code - 8)) << i;
  }
  // The signed maximum maps to code 0 and comes back exactly (d = max / -8 is exact in f16).
  EXPECT_EQ(y[64 + 5], -2.0f);
  EXPECT_EQ(y[96 + 3], 1.5f);  // the first of the tie sets d = -1.5 / 8
  for (int j = 0; j < 32; ++j) EXPECT_NEAR(y[128 + j], x[128 + j], 0.13f) << j;
}

TEST(GgufQuants, RowsOfPartialBlocksAreRefused) {
  std::vector<float> x(40, 1.0f);
  std::string out(64, '\0');
  testing::expect_throw_with<IoError>(
      [&] { quantize_row(GgmlType::kQ8_0, x.data(), reinterpret_cast<uint8_t*>(out.data()), 40); },
      "not whole Q8_0 blocks of 32");
}

}  // namespace
}  // namespace unillm::io
