// CheckpointReader and save_sharded: single file, HF-sharded index, stale-file cleanup, missing
// shards, and the refusal of pickled PyTorch / llama2.c checkpoints with a conversion hint.
#include "io/checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "io/json_file.h"
#include "io/safetensors_writer.h"
#include "support/expect.h"

namespace unillm::io {
namespace {
namespace fs = std::filesystem;

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::init_cpu();
    dir_ = fs::temp_directory_path() /
           ("unillm_ckpt_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string d() const { return dir_.string(); }
  std::string p(const std::string& f) const { return (dir_ / f).string(); }

  std::string open_error() {
    try {
      CheckpointReader::open(d());
    } catch (const IoError& e) {
      return e.what();
    }
    ADD_FAILURE() << "no error";
    return "";
  }

  NamedTensors model() const {
    NamedTensors ts;
    for (int i = 0; i < 5; ++i) {
      std::vector<float> v(16 * (i + 1));
      for (size_t k = 0; k < v.size(); ++k) v[k] = static_cast<float>(i * 100 + k);
      ts.emplace_back("model.layers." + std::to_string(i) + ".w", Tensor::from_vector(v, {i + 1, 16}));
    }
    return ts;
  }
  fs::path dir_;
};

void expect_same(const CheckpointReader& r, const NamedTensors& ts) {
  for (const auto& [name, t] : ts) {
    ASSERT_TRUE(r.has(name)) << name;
    testing::expect_close(r.get(name), t, 0.0);
    EXPECT_EQ(r.info(name).dtype, t.dtype());
  }
}

TEST_F(CheckpointTest, SingleFile) {
  auto ts = model();
  save_sharded(d(), ts, 1 << 20);
  EXPECT_TRUE(fs::exists(p("model.safetensors")));
  EXPECT_FALSE(fs::exists(p("model.safetensors.index.json")));
  auto r = CheckpointReader::open(d());
  ASSERT_EQ(r.names().size(), 5u);
  EXPECT_EQ(r.names()[0], "model.layers.0.w");
  expect_same(r, ts);
  // The path of the file itself also opens.
  expect_same(CheckpointReader::open(p("model.safetensors")), ts);
  EXPECT_THROW(r.get("nope"), IoError);
}

TEST_F(CheckpointTest, ShardedWithIndex) {
  auto ts = model();  // 64, 128, 192, 256, 320 bytes = 960
  save_sharded(d(), ts, 300);
  // Greedy: [64+128], [192], [256], [320]
  for (const char* f : {"model-00001-of-00004.safetensors", "model-00002-of-00004.safetensors",
                        "model-00003-of-00004.safetensors", "model-00004-of-00004.safetensors"})
    EXPECT_TRUE(fs::exists(p(f))) << f;
  EXPECT_FALSE(fs::exists(p("model.safetensors")));
  auto idx = read_json_file(p("model.safetensors.index.json"));
  EXPECT_EQ(idx["metadata"]["total_size"].get<size_t>(), 960u);
  EXPECT_EQ(idx["weight_map"]["model.layers.1.w"], "model-00001-of-00004.safetensors");
  EXPECT_EQ(idx["weight_map"]["model.layers.4.w"], "model-00004-of-00004.safetensors");
  auto r = CheckpointReader::open(d());
  EXPECT_EQ(r.files().size(), 4u);
  EXPECT_EQ(r.names().size(), 5u);
  expect_same(r, ts);

  // Saving again as one file removes the shards and the index.
  save_sharded(d(), ts, 1 << 20);
  size_t n = 0;
  for (auto it = fs::directory_iterator(dir_); it != fs::directory_iterator(); ++it) ++n;
  EXPECT_EQ(n, 1u);
  expect_same(CheckpointReader::open(d()), ts);
}

TEST_F(CheckpointTest, MissingShardIsNamed) {
  save_sharded(d(), model(), 300);
  fs::remove(p("model-00003-of-00004.safetensors"));
  std::string m = open_error();
  EXPECT_NE(m.find("model.safetensors.index.json"), std::string::npos) << m;
  EXPECT_NE(m.find("shard 'model-00003-of-00004.safetensors' (holding 'model.layers.3.w') does not exist"),
            std::string::npos) << m;
}

TEST_F(CheckpointTest, IndexPointingAtTheWrongShard) {
  save_sharded(d(), model(), 300);
  auto idx = read_json_file(p("model.safetensors.index.json"));
  idx["weight_map"]["model.layers.4.w"] = "model-00001-of-00004.safetensors";
  write_file_atomic(p("model.safetensors.index.json"), idx.dump());
  std::string m = open_error();
  EXPECT_NE(m.find("maps tensor 'model.layers.4.w' to shard 'model-00001-of-00004.safetensors', which does not hold it"),
            std::string::npos) << m;
}

TEST_F(CheckpointTest, BadIndexJsonNamesTheFile) {
  write_file_atomic(p("model.safetensors.index.json"), "{\n  \"weight_map\": {,\n}");
  std::string m = open_error();
  EXPECT_NE(m.find(p("model.safetensors.index.json") + ": invalid JSON at byte 19 (line 2, column 18)"),
            std::string::npos) << m;
  write_file_atomic(p("model.safetensors.index.json"), R"({"weight_map": {"a": "../x.safetensors"}})");
  EXPECT_NE(open_error().find("is not a file inside the directory"), std::string::npos);
}

TEST_F(CheckpointTest, PickledCheckpointsAreRefused) {
  write_file_atomic(p("pytorch_model.bin"), std::string("PK\x03\x04rest-of-zip", 16));
  write_file_atomic(p("config.json"), "{}");
  std::string m = open_error();
  EXPECT_NE(m.find("[checkpoint] " + d() + ": holds a pickled PyTorch checkpoint (pytorch_model.bin); "
                   "only safetensors are loaded"), std::string::npos) << m;
  EXPECT_NE(m.find("weights_only=True"), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos);

  fs::remove(p("pytorch_model.bin"));
  write_file_atomic(p("consolidated.00.pth"), std::string("\x80\x02}q\x00.", 6));
  EXPECT_NE(open_error().find("pickled PyTorch checkpoint (consolidated.00.pth)"), std::string::npos);
  EXPECT_THROW(CheckpointReader::open(p("consolidated.00.pth")), IoError);
}

TEST_F(CheckpointTest, Llama2cCheckpointGetsTheConverterHint) {
  fs::copy_file(testing::source_path("tests/data/stories260K/stories260K.bin"), p("stories260K.bin"));
  fs::copy_file(testing::source_path("tests/data/stories260K/tok512.bin"), p("tok512.bin"));
  std::string m = open_error();
  EXPECT_NE(m.find("holds a llama2.c checkpoint (stories260K.bin)"), std::string::npos) << m;
  EXPECT_NE(m.find("unillm convert llama2c --checkpoint"), std::string::npos) << m;
}

TEST_F(CheckpointTest, NothingFoundListsWhatWasExpected) {
  EXPECT_NE(open_error().find("no model.safetensors or model.safetensors.index.json (the directory is empty)"),
            std::string::npos);
  write_file_atomic(p("config.json"), "{}");
  EXPECT_NE(open_error().find("(found: config.json)"), std::string::npos);
  fs::remove_all(dir_);
  EXPECT_NE(open_error().find("no such file or directory"), std::string::npos);
}

}  // namespace
}  // namespace unillm::io
