// Token corpus files: writer/reader round trip (u16 and i32), and damaged or foreign files refused
// with the file named.
#include "data/token_corpus.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "data/error.h"
#include "data_layer/data_test_util.h"

namespace unillm::data {
namespace {

namespace fs = std::filesystem;
using testing::ScratchDir;
using testing::stories_tokenizer;
using Docs = std::vector<std::vector<int32_t>>;

const Docs kDocs = {{5, 6, 7}, {}, {511, 0}, {9}};  // an empty document is kept as one

std::string write_corpus(const ScratchDir& dir, const Docs& docs, const io::Tokenizer& tok,
                         const std::string& name = "c") {
  std::string prefix = dir.path() + "/" + name;
  TokenCorpusWriter w(prefix, tok);
  for (const auto& d : docs) w.add(d);
  w.finish();
  return prefix;
}

Docs read_back(const TokenCorpus& c) {
  Docs out;
  for (int64_t d = 0; d < c.num_docs(); ++d) {
    std::vector<int32_t> ids(c.doc_length(d));
    c.copy_tokens(c.doc_offset(d), c.doc_length(d), ids.data());
    out.push_back(ids);
  }
  return out;
}

TEST(TokenCorpus, RoundTripU16) {
  ScratchDir dir("corpus_rt");
  std::string prefix = write_corpus(dir, kDocs, stories_tokenizer());
  auto c = TokenCorpus::open(prefix);
  EXPECT_EQ(c->meta().dtype, TokenDType::kU16);
  EXPECT_EQ(c->meta().num_docs, 4);
  EXPECT_EQ(c->meta().num_tokens, 6);
  EXPECT_EQ(c->meta().vocab_size, 512);
  EXPECT_EQ(c->meta().fingerprint, tokenizer_fingerprint(stories_tokenizer()));
  EXPECT_EQ(read_back(*c), kDocs);
  EXPECT_EQ(fs::file_size(prefix + ".bin"), 32u + 2 * 6);
  EXPECT_EQ(fs::file_size(prefix + ".idx"), 64u + 8 * 5);
  EXPECT_FALSE(fs::exists(prefix + ".bin.tmp"));
}

TEST(TokenCorpus, RoundTripI32ForLargeVocabularies) {
  auto llama3 =
      io::Tokenizer::load(std::string(UNILLM_SOURCE_DIR) + "/tests/data/llama3-tokenizer");
  ASSERT_GT(llama3->vocab_size(), 65536);
  ScratchDir dir("corpus_rt32");
  const Docs docs = {{128000, 70000, 1}, {65536}};
  auto c = TokenCorpus::open(write_corpus(dir, docs, *llama3));
  EXPECT_EQ(c->meta().dtype, TokenDType::kI32);
  EXPECT_EQ(read_back(*c), docs);
  EXPECT_NE(c->meta().fingerprint, tokenizer_fingerprint(stories_tokenizer()));
}

TEST(TokenCorpus, IdsOutsideTheVocabularyAndUnfinishedWritesLeaveNothing) {
  ScratchDir dir("corpus_bad_id");
  {
    TokenCorpusWriter w(dir.path() + "/c", stories_tokenizer());
    w.add(std::vector<int32_t>{1, 2});
    EXPECT_THROW(w.add(std::vector<int32_t>{512}), DataError);
  }  // destroyed without finish()
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

// Rewrites `bytes` at `at` of file.
void patch(const std::string& file, size_t at, const std::string& bytes) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(at));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

void expect_data_error(const std::string& prefix, const std::string& file,
                       const std::string& what) {
  try {
    TokenCorpus::open(prefix);
    ADD_FAILURE() << "no error for " << what;
  } catch (const DataError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(file), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
  }
}

TEST(TokenCorpus, DamagedFilesAreClearErrorsNamingTheFile) {
  ScratchDir dir("corpus_damaged");
  auto fresh = [&] { return write_corpus(dir, kDocs, stories_tokenizer()); };
  std::string p = fresh();
  fs::resize_file(p + ".bin", fs::file_size(p + ".bin") - 2);
  expect_data_error(p, p + ".bin", "truncated");
  p = fresh();
  fs::resize_file(p + ".idx", fs::file_size(p + ".idx") - 8);
  expect_data_error(p, p + ".idx", "truncated");
  p = fresh();
  fs::resize_file(p + ".idx", 10);
  expect_data_error(p, p + ".idx", "too short");
  p = fresh();
  patch(p + ".bin", 0, "GARBAGE!");
  expect_data_error(p, p + ".bin", "bad magic");
  p = fresh();
  patch(p + ".idx", 8, std::string("\x07\0\0\0", 4));
  expect_data_error(p, p + ".idx", "version 7");
  p = fresh();
  patch(p + ".idx", 64 + 8 * 2, std::string("\x01\0\0\0\0\0\0\0", 8));  // offsets 0 3 1 5 6
  expect_data_error(p, p + ".idx", "out of order");
  // A .bin from another corpus.
  p = fresh();
  std::string other = write_corpus(dir, {{1, 2, 3}}, stories_tokenizer(), "other");
  fs::copy_file(other + ".bin", p + ".bin", fs::copy_options::overwrite_existing);
  expect_data_error(p, p + ".bin", "does not belong");
  fs::remove(p + ".bin");
  EXPECT_THROW(TokenCorpus::open(p), IoError);
}

}  // namespace
}  // namespace unillm::data
