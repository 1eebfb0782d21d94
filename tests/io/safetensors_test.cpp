// Safetensors: round trips per dtype, zero-copy views, misaligned data, and every corruption the
// header validation must catch (each error must name the file).
#include "io/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <tuple>

#include "io/json_file.h"
#include "io/safetensors_writer.h"
#include "support/expect.h"

namespace unillm::io {
namespace {
namespace fs = std::filesystem;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::init_cpu();
    dir_ = fs::temp_directory_path() /
           ("unillm_st_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& f) const { return (dir_ / f).string(); }

  // A file from a literal header (not padded) and a data section.
  std::string write_raw(const std::string& name, const std::string& header, const std::string& data) {
    std::string bytes(8, '\0');
    uint64_t n = header.size();
    std::memcpy(bytes.data(), &n, 8);
    bytes += header + data;
    write_file_atomic(path(name), bytes);
    return path(name);
  }

  // Expects opening PATH to throw IoError whose message names the file and contains `phrase`.
  void expect_error(const std::string& p, const std::string& phrase) {
    try {
      SafetensorsFile::open(p);
      ADD_FAILURE() << "no error for " << phrase;
    } catch (const IoError& e) {
      std::string m = e.what();
      EXPECT_NE(m.find("[safetensors] " + p + ":"), std::string::npos) << m;
      EXPECT_NE(m.find(phrase), std::string::npos) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << "one-line message: " << m;
    }
  }
  fs::path dir_;
};

Tensor sample(DType t, const Shape& s, float base) {
  std::vector<float> v(static_cast<size_t>(shape_numel(s)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = base + static_cast<float>(i) * (t == DType::i32 || t == DType::i64 ? 3.0f : -0.37f);
  return Tensor::from_vector(v, s, t);
}

TEST_F(SafetensorsTest, RoundTripEachDtype) {
  for (DType t : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64}) {
    SCOPED_TRACE(dtype_name(t));
    NamedTensors ts = {{"b.weight", sample(t, {3, 5}, 1.5f)},
                       {"a.scalar", sample(t, {}, -2.0f)},
                       {"c.empty", sample(t, {0, 4}, 0.0f)},
                       {"d.vec", sample(t, {7}, 9.0f)}};
    std::string p = path(std::string("rt_") + dtype_name(t) + ".safetensors");
    save_safetensors(p, ts, {{"format", "pt"}, {"note", "x"}});
    auto f = SafetensorsFile::open(p);
    ASSERT_EQ(f->tensors().size(), 4u);
    EXPECT_EQ(f->tensors()[0].name, "b.weight");  // file order = the order given
    EXPECT_EQ(f->metadata().at("format"), "pt");
    EXPECT_EQ(f->metadata().at("note"), "x");
    for (const auto& [name, want] : ts) {
      Tensor got = f->tensor(name);
      EXPECT_EQ(got.dtype(), t);
      EXPECT_EQ(shape_str(got.shape()), shape_str(want.shape()));
      ASSERT_EQ(got.nbytes(), want.nbytes());
      if (want.nbytes()) {
        EXPECT_EQ(std::memcmp(got.raw_data(), want.raw_data(), want.nbytes()), 0) << name;
      }
    }
    // Header padded with spaces: the data section starts 64-aligned.
    std::string bytes = read_file_bytes(p);
    uint64_t hlen;
    std::memcpy(&hlen, bytes.data(), 8);
    EXPECT_EQ((8 + hlen) % 64, 0u);
  }
}

// Tensors whose size is a multiple of 64 bytes come first in the file, so each starts on a
// 64-byte boundary of the mapping (kernels stream whole cache lines), whatever order they are
// given in; the others follow in their given order.
TEST_F(SafetensorsTest, WholeCacheLineTensorsAre64Aligned) {
  std::string p = path("aligned.safetensors");
  save_safetensors(p, {{"odd", sample(DType::f32, {3}, 1.0f)},
                       {"w1", sample(DType::f32, {4, 16}, 2.0f)},
                       {"odd2", sample(DType::f16, {5}, 3.0f)},
                       {"w2", sample(DType::bf16, {2, 64}, 4.0f)}});
  auto f = SafetensorsFile::open(p);
  ASSERT_EQ(f->tensors().size(), 4u);
  std::vector<std::string> order;
  for (const auto& t : f->tensors()) order.push_back(t.name);
  EXPECT_EQ(order, (std::vector<std::string>{"w1", "w2", "odd", "odd2"}));
  for (const char* name : {"w1", "w2"}) {
    Tensor t = f->tensor(name);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % 64, 0u) << name;
  }
  EXPECT_FLOAT_EQ(f->tensor("w2").to(DType::f32).item({1, 63}), sample(DType::bf16, {2, 64}, 4.0f).to(DType::f32).item({1, 63}));
  EXPECT_FLOAT_EQ(f->tensor("odd").item({2}), 1.0f - 2 * 0.37f);
}

// Written a window at a time (ZeRO's optimizer state): the same bytes as the whole tensors give,
// each window asked for once, in the file's layout order; a window of the wrong size is refused
// naming the tensor and leaves no file.
TEST_F(SafetensorsTest, PartsWriteTheSameFileAsWholeTensors) {
  const NamedTensors whole = {{"odd", sample(DType::f32, {7}, 1.0f)}, {"w", sample(DType::f32, {4, 16}, 2.0f)}};
  save_safetensors(path("whole.safetensors"), whole);
  std::vector<std::tuple<size_t, int64_t, int64_t>> asked;
  const std::vector<TensorSpec> specs = {{"odd", DType::f32, {7}}, {"w", DType::f32, {4, 16}}};
  save_safetensors_parts(path("parts.safetensors"), specs, 5, [&](size_t i, int64_t lo, int64_t hi) {
    asked.emplace_back(i, lo, hi);
    return whole[i].second.reshape({whole[i].second.numel()}).slice(0, lo, hi);
  });
  EXPECT_EQ(read_file_bytes(path("parts.safetensors")), read_file_bytes(path("whole.safetensors")));
  const std::vector<std::tuple<size_t, int64_t, int64_t>> expected = {
      {1, 0, 5}, {1, 5, 10}, {1, 10, 15}, {1, 15, 20}, {1, 20, 25}, {1, 25, 30}, {1, 30, 35}, {1, 35, 40},
      {1, 40, 45}, {1, 45, 50}, {1, 50, 55}, {1, 55, 60}, {1, 60, 64}, {0, 0, 5}, {0, 5, 7}};
  EXPECT_EQ(asked, expected);
  try {
    save_safetensors_parts(path("bad.safetensors"), specs, 5, [&](size_t, int64_t lo, int64_t hi) {
      return sample(DType::f32, {hi - lo + 1}, 0.0f);
    });
    ADD_FAILURE() << "no error";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("elements [0, 5) of tensor 'w'"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(path("bad.safetensors")));
}

TEST_F(SafetensorsTest, ZeroCopyViewsOutliveTheFile) {
  std::string p = path("zc.safetensors");
  save_safetensors(p, {{"x", sample(DType::f32, {4, 4}, 1.0f)}, {"y", sample(DType::f32, {2}, 5.0f)}});
  Tensor x, y;
  {
    auto f = SafetensorsFile::open(p);
    x = f->tensor("x");
    y = f->tensor("y");
    EXPECT_EQ(f->tensor("x").raw_data(), x.raw_data());  // the same bytes, not a copy
    EXPECT_EQ(static_cast<char*>(y.raw_data()) - static_cast<char*>(x.raw_data()),
              static_cast<ptrdiff_t>(f->info("y").data_begin - f->info("x").data_begin));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(x.raw_data()) % 8, 0u);
  }
  EXPECT_FLOAT_EQ(x.item({3, 3}), 1.0f - 15 * 0.37f);  // mapping alive after the file object
  x.data<float>()[0] = 42.0f;  // private mapping: the file is not modified
  EXPECT_FLOAT_EQ(SafetensorsFile::open(p)->tensor("x").item({0, 0}), 1.0f);
}

// VmRSS of this process in KiB.
long rss_kib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

TEST_F(SafetensorsTest, DroppedPagesLeaveTheResidentSetAndReadBackFromTheFile) {
  std::string p = path("big.safetensors");
  const int64_t n = 4 << 20;  // 16 MiB of f32
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i % 1000);
  save_safetensors(p, {{"w", Tensor::from_vector(v, {n})}});
  v = {};
  auto f = SafetensorsFile::open(p);
  Tensor w = f->tensor("w");
  const long before = rss_kib();
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += w.data<float>()[i];  // fault every page in
  const long touched = rss_kib();
  f->drop_pages("w");
  const long dropped = rss_kib();
  EXPECT_GT(touched - before, 15 * 1024) << "pages did not become resident?";
  EXPECT_GT(touched - dropped, 15 * 1024) << "drop_pages left them resident";
  double again = 0;
  for (int64_t i = 0; i < n; ++i) again += w.data<float>()[i];  // re-read from the file
  EXPECT_EQ(again, sum);
}

TEST_F(SafetensorsTest, NonContiguousInputIsWrittenInLogicalOrder) {
  Tensor a = sample(DType::f32, {2, 3}, 0.0f);
  std::string p = path("nc.safetensors");
  save_safetensors(p, {{"t", a.transpose(0, 1)}});
  Tensor got = SafetensorsFile::open(p)->tensor("t");
  ASSERT_EQ(shape_str(got.shape()), "[3, 2]");
  testing::expect_close(got, a.transpose(0, 1).contiguous(), 0.0);
}

TEST_F(SafetensorsTest, MisalignedDataIsCopiedAligned) {
  // Header of 8k+2 bytes: the F32 data starts at an address that is 2 mod 4.
  std::string header = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  while ((header.size() + 8) % 4 != 2) header += ' ';
  float vals[2] = {1.25f, -3.5f};
  std::string p = write_raw("mis.safetensors", header, std::string(reinterpret_cast<char*>(vals), 8));
  Tensor t = SafetensorsFile::open(p)->tensor("w");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % 4, 0u);
  EXPECT_FLOAT_EQ(t.item({0}), 1.25f);
  EXPECT_FLOAT_EQ(t.item({1}), -3.5f);
}

TEST_F(SafetensorsTest, ParsesFromMemory) {
  std::string p = path("m.safetensors");
  save_safetensors(p, {{"a", sample(DType::bf16, {3}, 1.0f)}}, {});
  std::string b = read_file_bytes(p);
  auto h = parse_safetensors_header(reinterpret_cast<const uint8_t*>(b.data()), b.size(), b.size());
  ASSERT_EQ(h.tensors.size(), 1u);
  EXPECT_EQ(h.tensors[0].dtype, DType::bf16);
  EXPECT_EQ(h.data_bytes, 6u);
  EXPECT_TRUE(h.metadata.empty());
}

TEST_F(SafetensorsTest, CorruptFilesNameTheFileAndTheProblem) {
  const std::string f8 = std::string(8, '\0');
  write_file_atomic(path("short"), "abcde");
  expect_error(path("short"), "file is 5 bytes, shorter than the 8-byte header length");
  {
    std::string b(8, '\0');
    uint64_t n = 1000;
    std::memcpy(b.data(), &n, 8);
    write_file_atomic(path("long_header"), b + "{}");
    expect_error(path("long_header"), "header length 1000 exceeds the file (10 bytes)");
  }
  expect_error(write_raw("notjson", "{\"a\": ", ""), "header is not valid JSON");
  expect_error(write_raw("array", "[1, 2]", ""), "header must be a JSON object, got array");
  expect_error(write_raw("f8", R"({"x":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})", "ab"),
               "tensor 'x': unsupported dtype 'F8_E4M3'");
  expect_error(write_raw("size", R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", f8),
               "tensor 'x': shape [3] x F32 (4 bytes) = 12 bytes, but data offsets [0, 8) hold 8 bytes");
  expect_error(write_raw("range", R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", f8),
               "tensor 'x': data offsets [0, 16) exceed the data section (8 bytes)");
  expect_error(write_raw("overlap", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                    R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", f8),
               "tensor 'b': data offsets [4, 8) overlap tensor 'a' [0, 8)");
  expect_error(write_raw("gap", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                R"("b":{"dtype":"I32","shape":[1],"data_offsets":[6,10]}})", f8 + "ab"),
               "bytes [4, 6) of the data section belong to no tensor (gap before tensor 'b')");
  expect_error(write_raw("tail", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", f8),
               "bytes [4, 8) of the data section belong to no tensor");
  expect_error(write_raw("dup", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", f8),
               "tensor 'a' appears twice");
  expect_error(write_raw("rev", R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}})", ""),
               "tensor 'a': data offsets [4, 0) are reversed");
  expect_error(write_raw("neg", R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", ""),
               "tensor 'a': \"shape\" must be an array of non-negative integers");
  expect_error(write_raw("meta", R"({"__metadata__":{"k":1}})", ""), "\"__metadata__\" value of 'k'");
  expect_error(write_raw("nodtype", R"({"a":{"shape":[0],"data_offsets":[0,0]}})", ""),
               "tensor 'a': missing string \"dtype\"");
  expect_error(write_raw("offs", R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[0]}})", ""),
               "\"data_offsets\" must be [begin, end]");
  expect_error(path("does_not_exist.safetensors"), "cannot open");
}

TEST_F(SafetensorsTest, EmptyHeaderIsAValidEmptyFile) {
  std::string p = write_raw("empty", "{}      ", "");
  auto f = SafetensorsFile::open(p);
  EXPECT_TRUE(f->tensors().empty());
  EXPECT_FALSE(f->has("x"));
  EXPECT_THROW(f->info("x"), IoError);
}

TEST_F(SafetensorsTest, WriterRejectsBadNamesAndLeavesNoFile) {
  std::string p = path("bad.safetensors");
  Tensor a = sample(DType::f32, {2}, 0.0f);
  EXPECT_THROW(save_safetensors(p, {{"a", a}, {"a", a}}), IoError);
  EXPECT_THROW(save_safetensors(p, {{"", a}}), IoError);
  EXPECT_THROW(save_safetensors(p, {{"u", Tensor()}}), IoError);
  EXPECT_FALSE(fs::exists(p));
  for (const auto& e : fs::directory_iterator(dir_)) ADD_FAILURE() << "left behind: " << e.path();
}

}  // namespace
}  // namespace unillm::io
