// unillm's tokenized-rows dir (data/tokenized_store.h): every per-row array and counter survives a
// save and a load; damaged bytes and manifests are refused naming the file; a `datasets` save is
// refused by name. The byte layout is re-read here by hand (an independent reading of the header).
#include "data/tokenized_store.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "data/error.h"
#include "support/expect.h"
#include "support/run_cli.h"

namespace unillm::data {
namespace {

namespace fs = std::filesystem;

// Pairwise rows (group 2) with labels, positions, segments and tags: everything the format holds.
TokenizedDataset sample() {
  TokenizedDataset d;
  d.rows = {{1, 2, 3}, {4, 5}, {}, {7, 8, 9, 10}};
  d.labels = {{kIgnoreIndex, 2, 3}, {kIgnoreIndex, 5}, {}, {7, kIgnoreIndex, 9, 10}};
  d.position_ids = {{0, 1, 0}, {0, 1}, {}, {0, 1, 2, 3}};
  d.segment_ids = {{1, 1, 2}, {1, 1}, {}, {1, 1, 1, 1}};
  d.group = 2;
  d.tags = {1, 0};
  d.documents = 7;
  d.skipped_records = 1;
  return d;
}

void expect_same(const TokenizedDataset& a, const TokenizedDataset& b) {
  EXPECT_EQ(a.rows, b.rows);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_EQ(a.position_ids, b.position_ids);
  EXPECT_EQ(a.segment_ids, b.segment_ids);
  EXPECT_EQ(a.group, b.group);
  EXPECT_EQ(a.tags, b.tags);
  EXPECT_EQ(a.documents, b.documents);
  EXPECT_EQ(a.skipped_records, b.skipped_records);
}

TokenizedDataset decode(const std::string& bytes) {
  return decode_rows(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "x.rows");
}

TEST(TokenizedStore, RowsRoundTripAndTheHeaderReadsAsDocumented) {
  const std::string bytes = encode_rows(sample());
  expect_same(decode(bytes), sample());
  ASSERT_EQ(bytes.substr(0, 8), "UNILLMRW");
  uint32_t version, flags;
  int64_t counts[5];
  std::memcpy(&version, bytes.data() + 8, 4);
  std::memcpy(&flags, bytes.data() + 12, 4);
  std::memcpy(counts, bytes.data() + 16, sizeof counts);
  EXPECT_EQ(version, 1u);
  EXPECT_EQ(flags, 15u);
  EXPECT_EQ(counts[0], 4);  // rows
  EXPECT_EQ(counts[1], 2);  // group
  EXPECT_EQ(counts[4], 9);  // tokens
  // header 56 + lengths 4×8 + four arrays of 9 i32 + 2 tags + checksum 8
  EXPECT_EQ(bytes.size(), 56u + 32 + 4 * 36 + 2 + 8);
  TokenizedDataset plain;
  plain.rows = {{3, 1}, {4}};
  expect_same(decode(encode_rows(plain)), plain);
  TokenizedDataset empty;
  expect_same(decode(encode_rows(empty)), empty);
}

TEST(TokenizedStore, DamagedBytesAreRefused) {
  const std::string good = encode_rows(sample());
  auto refused = [&](std::string bytes, const std::string& part) {
    testing::expect_throw_with<DataError>([&] { decode(bytes); }, part);
  };
  refused(good.substr(0, good.size() - 1), "checksum mismatch");
  refused(good.substr(0, 20), "shorter than a header");
  std::string flipped = good;
  flipped[100] ^= 1;
  refused(flipped, "x.rows: checksum mismatch (a corrupted or truncated tokenized file)");
  std::string magic = good;
  magic[0] = 'X';
  refused(magic, "bad magic");
  // A consistent checksum over inconsistent counts: the counts are still checked.
  auto resealed = [](std::string b, size_t at, int64_t v) {
    std::memcpy(b.data() + at, &v, 8);
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i + 8 < b.size(); ++i)
      h = (h ^ static_cast<unsigned char>(b[i])) * 0x100000001b3ULL;
    std::memcpy(b.data() + b.size() - 8, &h, 8);
    return b;
  };
  refused(resealed(good, 16, 1 << 30), "more row lengths than bytes");
  refused(resealed(good, 24, 3), "group 3");
  refused(resealed(good, 48, 10), "row lengths that do not add up");
  refused(resealed(good, 56, -1), "row lengths that do not add up");
  std::string neg = good;  // the first id (after the 56-byte header and 4 lengths) = -5
  const int32_t minus5 = -5;
  std::memcpy(neg.data() + 88, &minus5, 4);
  std::string sealed = resealed(neg, 16, 4);
  refused(sealed, "ids of row 0 holds -5");
}

SavedRows saved() {
  SavedRows s;
  s.identity.stage = "dpo";
  s.identity.template_name = "alpaca";
  s.identity.tokenizer = 0xfedcba9876543210ULL;
  s.identity.vocab_size = 512;
  s.identity.cutoff_len = 96;
  s.identity.dataset = {"a", "b"};
  s.train = sample();
  s.eval = sample();
  s.eval.rows.pop_back();
  s.eval.rows.pop_back();
  for (auto* v : {&s.eval.labels, &s.eval.position_ids, &s.eval.segment_ids}) v->resize(2);
  s.eval.tags = {0};
  s.pad_id = 3;
  s.mask_label_id = 3;
  s.description = "dpo, template 'alpaca'";
  return s;
}

TEST(TokenizedStore, DirRoundTrip) {
  const std::string dir = testing::temp_dir("tokstore") + "/rows";
  EXPECT_FALSE(has_tokenized_data(dir));
  save_tokenized(dir, saved());
  EXPECT_TRUE(has_tokenized_data(dir));
  const SavedRows s = load_tokenized(dir);
  expect_same(s.train, saved().train);
  expect_same(s.eval, saved().eval);
  EXPECT_EQ(s.identity.stage, "dpo");
  EXPECT_EQ(s.identity.template_name, "alpaca");
  EXPECT_EQ(s.identity.tokenizer, 0xfedcba9876543210ULL);
  EXPECT_EQ(s.identity.vocab_size, 512);
  EXPECT_EQ(s.identity.cutoff_len, 96);
  EXPECT_EQ(s.identity.dataset, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(s.pad_id, 3);
  EXPECT_EQ(s.mask_label_id, 3);
  EXPECT_EQ(s.description, "dpo, template 'alpaca'");
  const auto m = nlohmann::json::parse(testing::slurp(dir + "/unillm_tokenized.json"));
  EXPECT_EQ(m.at("tokenizer").at("fingerprint"), "fedcba9876543210");
}

TEST(TokenizedStore, BadDirsAreRefusedByName) {
  const std::string root = testing::temp_dir("tokstore_bad");
  fs::create_directories(root + "/hf/train");
  std::ofstream(root + "/hf/train/data-00000-of-00001.arrow") << "arrow";
  testing::expect_throw_with<DataError>(
      [&] { load_tokenized(root + "/hf"); },
      "Arrow files (data-00000-of-00001.arrow: a `datasets` save)");
  std::ofstream(root + "/hf/dataset_dict.json") << "{}";
  testing::expect_throw_with<DataError>([&] { load_tokenized(root + "/hf"); },
                                        "a Hugging Face `datasets` save (dataset_dict.json)");
  const std::string dir = root + "/rows";
  save_tokenized(dir, saved());
  const std::string manifest = dir + "/unillm_tokenized.json";
  const std::string good = testing::slurp(manifest);
  auto with = [&](const std::function<void(nlohmann::json&)>& edit, const std::string& part) {
    nlohmann::json m = nlohmann::json::parse(good);
    edit(m);
    std::ofstream(manifest) << m.dump();
    testing::expect_throw_with<DataError>([&] { load_tokenized(dir); }, part);
  };
  with([](nlohmann::json& m) { m.erase("stage"); }, "unillm_tokenized.json: key 'stage' missing");
  with([](nlohmann::json& m) { m["version"] = 2; }, "version 2, this unillm reads version 1");
  with([](nlohmann::json& m) { m["format"] = "arrow"; }, "format 'arrow'");
  with([](nlohmann::json& m) { m["pad_id"] = "x"; }, "key 'pad_id' has the wrong type");
  with([](nlohmann::json& m) { m["tokenizer"]["fingerprint"] = "xyz"; }, "is not 16 hex digits");
  with([](nlohmann::json& m) { m["splits"]["train"]["rows"] = 5; }, "files from different saves?");
  with([](nlohmann::json& m) { m["splits"]["eval"]["file"] = "../x.rows"; },
       "must be a file name in the dir");
  with([](nlohmann::json& m) { m["splits"]["eval"]["file"] = "gone.rows"; }, "gone.rows: missing");
}

}  // namespace
}  // namespace unillm::data
