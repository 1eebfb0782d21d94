// K-quant dequantisers (Q4_K, Q5_K, Q6_K) against super-blocks built here from the documented
// layout, and the reader's refusals: truncated files, corrupt headers, unknown and unreadable
// tensor types (each error names the file and the tensor or key).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "core/dtype.h"
#include "io/gguf.h"
#include "io/json_file.h"
#include "support/expect.h"

namespace unillm::io {
namespace {

namespace fs = std::filesystem;

// Random 6-bit scales/mins of the 8 sub-blocks packed as ggml does in 12 bytes: bytes 0-3 the
// scales of sub-blocks 0-3, bytes 4-7 their mins (low 6 bits each); sub-blocks 4-7 keep their
// low 4 bits in bytes 8-11 (scale low nibble, min high nibble) and their top 2 bits in the top
// bits of bytes 0-3 (scales) and 4-7 (mins).
struct ScalesMins {
  int sc[8], m[8];
  uint8_t packed[12] = {};
};
ScalesMins pack_scales(std::mt19937& rng) {
  ScalesMins s;
  for (int j = 0; j < 8; ++j)
    s.sc[j] = static_cast<int>(rng() % 64), s.m[j] = static_cast<int>(rng() % 64);
  for (int j = 0; j < 4; ++j) {
    s.packed[j] = static_cast<uint8_t>(s.sc[j] | ((s.sc[j + 4] >> 4) << 6));
    s.packed[j + 4] = static_cast<uint8_t>(s.m[j] | ((s.m[j + 4] >> 4) << 6));
    s.packed[j + 8] = static_cast<uint8_t>((s.sc[j + 4] & 0xF) | ((s.m[j + 4] & 0xF) << 4));
  }
  return s;
}

void put_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

std::vector<float> dequant(GgmlType t, const std::vector<uint8_t>& block) {
  std::vector<float> y(256);
  dequantize_row(static_cast<uint32_t>(t), block.data(), y.data(), 256);
  return y;
}

TEST(GgufKQuants, Q4KMatchesAHandBuiltBlock) {
  std::mt19937 rng(11);
  const float d = 0.015625f, dmin = 0.0078125f;  // exact in f16
  const ScalesMins s = pack_scales(rng);
  std::vector<int> q(256);
  for (auto& v : q) v = static_cast<int>(rng() % 16);
  // Layout: f16 d, f16 dmin, scales[12], qs[128]; sub-block j's element l is the low nibble of
  // qs[32·(j/2) + l] for even j, the high nibble for odd j.
  std::vector<uint8_t> b(144, 0);
  put_f16(b.data(), d);
  put_f16(b.data() + 2, dmin);
  std::memcpy(b.data() + 4, s.packed, 12);
  for (int e = 0; e < 256; ++e) {
    const int j = e / 32, l = e % 32;
    b[16 + 32 * (j / 2) + l] |= static_cast<uint8_t>(j % 2 == 0 ? q[e] : q[e] << 4);
  }
  const std::vector<float> y = dequant(GgmlType::kQ4_K, b);
  for (int e = 0; e < 256; ++e) {
    const int j = e / 32;
    EXPECT_FLOAT_EQ(y[e], d * s.sc[j] * q[e] - dmin * s.m[j]) << e;
  }
}

TEST(GgufKQuants, Q5KMatchesAHandBuiltBlock) {
  std::mt19937 rng(12);
  const float d = 0.03125f, dmin = 0.25f;
  const ScalesMins s = pack_scales(rng);
  std::vector<int> q(256);
  for (auto& v : q) v = static_cast<int>(rng() % 32);
  // Layout: f16 d, f16 dmin, scales[12], qh[32], qs[128]; the low 4 bits as in Q4_K, the fifth
  // bit of sub-block j's element l is bit j of qh[l].
  std::vector<uint8_t> b(176, 0);
  put_f16(b.data(), d);
  put_f16(b.data() + 2, dmin);
  std::memcpy(b.data() + 4, s.packed, 12);
  for (int e = 0; e < 256; ++e) {
    const int j = e / 32, l = e % 32;
    b[48 + 32 * (j / 2) + l] |= static_cast<uint8_t>(j % 2 == 0 ? (q[e] & 0xF) : (q[e] & 0xF) << 4);
    if (q[e] & 16) b[16 + l] |= static_cast<uint8_t>(1u << j);
  }
  const std::vector<float> y = dequant(GgmlType::kQ5_K, b);
  for (int e = 0; e < 256; ++e) {
    const int j = e / 32;
    EXPECT_FLOAT_EQ(y[e], d * s.sc[j] * q[e] - dmin * s.m[j]) << e;
  }
}

TEST(GgufKQuants, Q6KMatchesAHandBuiltBlock) {
  std::mt19937 rng(13);
  const float d = 0.0009765625f;
  int8_t sc[16];
  for (auto& v : sc) v = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
  std::vector<int> q(256);
  for (auto& v : q) v = static_cast<int>(rng() % 64);
  // Layout: ql[128], qh[64], i8 scales[16], f16 d. Element e: half h = e / 128, w = e % 128,
  // k = w / 32, l = w % 32; low 4 bits in ql[64h + l + 32·(k % 2)] (low nibble for k < 2, high
  // for k >= 2); high 2 bits at bits 2k of qh[32h + l]; scale sc[8h + w / 16]; x = d·sc·(q − 32).
  std::vector<uint8_t> b(210, 0);
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, w = e % 128, k = w / 32, l = w % 32;
    b[64 * h + l + 32 * (k % 2)] |= static_cast<uint8_t>(k < 2 ? (q[e] & 0xF) : (q[e] & 0xF) << 4);
    b[128 + 32 * h + l] |= static_cast<uint8_t>((q[e] >> 4) << (2 * k));
  }
  std::memcpy(b.data() + 192, sc, 16);
  put_f16(b.data() + 208, d);
  const std::vector<float> y = dequant(GgmlType::kQ6_K, b);
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, w = e % 128;
    EXPECT_FLOAT_EQ(y[e], d * sc[8 * h + w / 16] * (q[e] - 32)) << e;
  }
}

// ---- bad files ----

class GgufBadFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::init_cpu();
    dir_ = fs::temp_directory_path() /
           ("unillm_ggufbad_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::vector<float> w(64 * 2, 0.5f);
    write_gguf(path("good.gguf"), {{"general.architecture", GgufValue::string("llama")}},
               {{"blk.0.attn_q.weight", {2, 64}, GgmlType::kF32, [w] {
                   return std::string(reinterpret_cast<const char*>(w.data()), w.size() * 4);
                 }}});
    good_ = read_file_bytes(path("good.gguf"));
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& f) const { return (dir_ / f).string(); }
  std::string write(const std::string& name, const std::string& bytes) {
    write_file_atomic(path(name), bytes);
    return path(name);
  }
  // Offset of the tensor info's type field (after name, n_dims and two dims).
  size_t type_field() const {
    const size_t at = good_.find("blk.0.attn_q.weight");
    return at + std::strlen("blk.0.attn_q.weight") + 4 + 16;
  }
  fs::path dir_;
  std::string good_;
};

TEST_F(GgufBadFileTest, TruncatedFilesNameTheFileAndWhatWasCut) {
  const std::string p = write("cut.gguf", good_.substr(0, good_.size() - 100));
  testing::expect_throw_with<IoError>([&] { GgufFile::open(p); },
                                      p + ": tensor 'blk.0.attn_q.weight'");
  testing::expect_throw_with<IoError>([&] { GgufFile::open(p); }, "truncated?");
  const std::string h = write("head.gguf", good_.substr(0, 40));
  testing::expect_throw_with<IoError>([&] { GgufFile::open(h); }, h + ": file ends inside");
  const std::string tiny = write("tiny.gguf", good_.substr(0, 10));
  testing::expect_throw_with<IoError>([&] { GgufFile::open(tiny); }, "shorter than a GGUF header");
}

TEST_F(GgufBadFileTest, CorruptHeadersAreRefused) {
  std::string bad = good_;
  bad[0] = 'X';
  const std::string magic = write("magic.gguf", bad);
  testing::expect_throw_with<IoError>([&] { GgufFile::open(magic); }, "not a GGUF file");
  bad = good_;
  bad[4] = 9;
  testing::expect_throw_with<IoError>([&] { GgufFile::open(write("v.gguf", bad)); },
                                      "GGUF version 9");
  bad = good_;
  const uint64_t huge = uint64_t{1} << 40;
  std::memcpy(bad.data() + 8, &huge, 8);
  testing::expect_throw_with<IoError>([&] { GgufFile::open(write("n.gguf", bad)); },
                                      "do not fit the file");
  bad = good_;
  const uint64_t offset = 7;  // the tensor's offset field follows its type
  std::memcpy(bad.data() + type_field() + 4, &offset, 8);
  testing::expect_throw_with<IoError>([&] { GgufFile::open(write("o.gguf", bad)); },
                                      "tensor 'blk.0.attn_q.weight': offset 7 is not a multiple");
}

TEST_F(GgufBadFileTest, UnknownTensorTypesNameTheTensor) {
  std::string bad = good_;
  const uint32_t type = 99;
  std::memcpy(bad.data() + type_field(), &type, 4);
  const std::string p = write("t99.gguf", bad);
  testing::expect_throw_with<IoError>([&] { GgufFile::open(p); },
                                      p + ": tensor 'blk.0.attn_q.weight': unknown ggml type 99");
}

TEST_F(GgufBadFileTest, KnownButUnreadableTypesFailWhenRead) {
  // Q4_1 (20-byte blocks of 32): 2 rows of 64 = 80 bytes, within the original 512.
  std::string bad = good_;
  const uint32_t type = 3;
  std::memcpy(bad.data() + type_field(), &type, 4);
  const std::string p = write("q41.gguf", bad);
  auto f = GgufFile::open(p);  // listing works
  EXPECT_EQ(f->tensor("blk.0.attn_q.weight").nbytes, 80u);
  testing::expect_throw_with<IoError>([&] { f->to_f32("blk.0.attn_q.weight"); },
                                      p + ": tensor 'blk.0.attn_q.weight' has type Q4_1");
  testing::expect_throw_with<IoError>([&] { f->tensor("nope"); }, p + ": no tensor 'nope'");
  testing::expect_throw_with<IoError>([&] { f->get_int("general.architecture"); },
                                      "expected an integer");
}

}  // namespace
}  // namespace unillm::io
