// Byte-level BPE (Qwen2 vocab.json + merges.txt, its tokenizer.json form) and tiktoken (Llama 3):
// BOS/EOS rules, parse_special, NFC, ill-formed UTF-8 input, and malformed files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "io/tokenizer.h"
#include "support/expect.h"
#include "tokenizer_test_util.h"

namespace unillm::io {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string qwen2_dir() { return testing::source_path("tests/data/qwen2-tokenizer"); }
std::string llama3_dir() { return testing::source_path("tests/data/llama3-tokenizer"); }

using testing::slurp;

using testing::fresh_dir;
using testing::spit;

std::vector<std::string> vector_texts() {
  std::string inp =
      slurp(testing::source_path("tests/data/llama.cpp-vocab-tests/ggml-vocab-qwen2.gguf.inp"));
  std::vector<std::string> texts;
  const std::string sep = "\n__ggml_vocab_test__\n";
  for (size_t pos = 0, hit; (hit = inp.find(sep, pos)) != std::string::npos; pos = hit + sep.size())
    texts.push_back(inp.substr(pos, hit - pos));
  return texts;
}

TEST(TokenizerBpe, Qwen2SpecialTokens) {
  auto tok = Tokenizer::load(qwen2_dir());
  EXPECT_EQ(tok->vocab_size(), 151646);
  EXPECT_EQ(tok->bos_id(), -1);
  EXPECT_EQ(tok->eos_id(), 151645);
  EXPECT_FALSE(tok->adds_bos());
  EXPECT_EQ(tok->encode("Hello world"), (std::vector<int32_t>{9707, 1879}));
  EXPECT_EQ(tok->id_to_token(1879), "\xC4\xA0world");  // "Ġworld"
  EXPECT_EQ(tok->token_to_id("<|im_end|>"), 151645);
  EXPECT_TRUE(tok->is_special(151643) && tok->is_special(151645) && !tok->is_special(9707));
  const std::string text = "<|im_start|>user\nHi<|im_end|>";
  auto plain = tok->encode(text);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 151645), 0);
  EXPECT_GT(plain.size(), 6u);
  auto parsed = tok->encode(text, {.parse_special = true});
  ASSERT_EQ(parsed.size(), 5u);
  EXPECT_EQ(parsed.front(), 151644);
  EXPECT_EQ(parsed.back(), 151645);
  EXPECT_EQ(tok->decode(parsed), text);
  EXPECT_EQ(tok->decode(plain), text);
  EXPECT_EQ(tok->decode(parsed, true), "user\nHi");
}

TEST(TokenizerBpe, Qwen2Nfc) {
  auto tok = Tokenizer::load(qwen2_dir());
  // "é" decomposed (e + U+0301) and precomposed tokenize alike; so do Hangul jamo and syllables.
  EXPECT_EQ(tok->encode("caf\x65\xCC\x81"), tok->encode("caf\xC3\xA9"));
  EXPECT_EQ(tok->encode("\xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB"), tok->encode("\xED\x95\x9C"));
  EXPECT_NE(tok->encode("\xCC\x81"), tok->encode("\xC3\xA9"));
}

TEST(TokenizerBpe, Llama3SpecialTokensAndBos) {
  auto tok = Tokenizer::load(llama3_dir());
  EXPECT_EQ(tok->vocab_size(), 128256);
  EXPECT_EQ(tok->bos_id(), 128000);
  EXPECT_EQ(tok->eos_id(), 128001);
  EXPECT_TRUE(tok->adds_bos());
  EXPECT_EQ(tok->stop_ids(), (std::vector<int32_t>{128001, 128009}));
  EXPECT_EQ(tok->encode("Hello world"), (std::vector<int32_t>{128000, 9906, 1917}));
  EXPECT_EQ(tok->token_to_id("<|start_header_id|>"), 128006);
  EXPECT_EQ(tok->token_to_id("<|reserved_special_token_250|>"), 128255);
  EXPECT_EQ(tok->id_to_token(1917), "\xC4\xA0world");
  const std::string text = "Hi<|eot_id|>";
  auto plain = tok->encode(text, {.add_special_tokens = false});
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 128009), 0);
  auto parsed = tok->encode(text, {.add_special_tokens = false, .parse_special = true});
  EXPECT_EQ(parsed, (std::vector<int32_t>{13347, 128009}));
  EXPECT_EQ(tok->decode(parsed), text);
  EXPECT_EQ(tok->decode(parsed, true), "Hi");
  EXPECT_EQ(tok->decode({128000, 9906, 1917}), "<|begin_of_text|>Hello world");
}

TEST(TokenizerBpe, IllFormedUtf8IsReplaced) {
  for (const std::string& dir :
       {qwen2_dir(), llama3_dir(), testing::source_path("tests/data/llama2-tokenizer")}) {
    auto tok = Tokenizer::load(dir);
    const std::string bad("a\xFF\xC3(b\xE4\xBD", 7),
        fixed = "a\xEF\xBF\xBD\xEF\xBF\xBD(b\xEF\xBF\xBD";
    EXPECT_EQ(tok->encode(bad), tok->encode(fixed)) << dir;
    EXPECT_EQ(tok->decode(tok->encode(bad), true), fixed) << dir;
  }
}

// The tokenizer.json form of the Qwen2 files (as HF writes it: NFC, Split + ByteLevel, ByteLevel
// decoder) must give the same ids as vocab.json + merges.txt.
TEST(TokenizerBpe, Qwen2TokenizerJsonMatchesVocabMerges) {
  auto ref = Tokenizer::load(qwen2_dir());
  json merges = json::array();
  std::istringstream ms(slurp(qwen2_dir() + "/merges.txt"));
  for (std::string line; std::getline(ms, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty() && line[0] != '#') merges.push_back(line);
  }
  const char* regex =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  json j;
  j["added_tokens"] = json::array();
  for (auto [id, content] :
       {std::pair{151643, "<|endoftext|>"}, {151644, "<|im_start|>"}, {151645, "<|im_end|>"}})
    j["added_tokens"].push_back({{"id", id}, {"content", content}, {"special", true}});
  j["normalizer"] = {{"type", "NFC"}};
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         {{{"type", "Split"},
                           {"pattern", {{"Regex", regex}}},
                           {"behavior", "Isolated"},
                           {"invert", false}},
                          {{"type", "ByteLevel"},
                           {"add_prefix_space", false},
                           {"trim_offsets", false},
                           {"use_regex", false}}}}};
  j["post_processor"] = {{"type", "ByteLevel"}};
  j["decoder"] = {{"type", "ByteLevel"}};
  j["model"] = {{"type", "BPE"},
                {"vocab", json::parse(slurp(qwen2_dir() + "/vocab.json"))},
                {"merges", merges}};
  fs::path dir = fresh_dir("qwen2json");
  spit(dir / "tokenizer.json", j.dump());
  fs::copy_file(qwen2_dir() + "/tokenizer_config.json", dir / "tokenizer_config.json");
  auto tj = Tokenizer::load(dir.string());
  EXPECT_EQ(tj->eos_id(), 151645);
  for (const std::string& s : vector_texts()) {
    EXPECT_EQ(tj->encode(s), ref->encode(s)) << s;
    EXPECT_EQ(tj->decode(tj->encode(s)), s);
  }
  fs::remove_all(dir);
}

void expect_load_error(const fs::path& dir, const std::string& file, const std::string& needle) {
  try {
    Tokenizer::load(dir.string());
    ADD_FAILURE() << "no error, expected: " << needle;
  } catch (const IoError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find(file), std::string::npos) << what;
    EXPECT_NE(what.find(needle), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

TEST(TokenizerBpe, MalformedFilesThrow) {
  fs::path dir = fresh_dir("malformed");
  expect_load_error(dir, dir.string(), "no tokenizer.json");
  spit(dir / "vocab.json", R"({"a": 0, "b": 1, "ab": 2})");
  expect_load_error(dir, "merges.txt", "missing");
  spit(dir / "merges.txt", "#version: 0.2\na b\nab c\n");
  expect_load_error(dir, "vocab.json", "merge 1 'ab c'");
  spit(dir / "merges.txt", "#version: 0.2\na b c\n");
  expect_load_error(dir, "merges.txt", "line 2");
  spit(dir / "tokenizer.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}");
  expect_load_error(dir, "tokenizer.json", "bad JSON");
  spit(dir / "tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}}})");
  expect_load_error(dir, "tokenizer.json", "model.merges missing");
  spit(dir / "tokenizer.json", R"({"model": {"type": "BPE", "merges": []}})");
  expect_load_error(dir, "tokenizer.json", "model.vocab missing");
  spit(dir / "tokenizer.json", R"({"model": {"type": "Unigram", "vocab": []}})");
  expect_load_error(dir, "tokenizer.json", "model.type 'Unigram'");
  spit(dir / "tokenizer.json", R"({"model": {"vocab": {"a": "x"}, "merges": []}})");
  expect_load_error(dir, "tokenizer.json", "not an integer");
  spit(dir / "tokenizer.json", R"({"model": {"vocab": {"a": 0}, "merges": [7]}})");
  expect_load_error(dir, "tokenizer.json", "model.merges[0]");
  spit(
      dir / "tokenizer.json",
      R"({"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(("}}, "model": {"vocab": {"a": 0}, "merges": []}})");
  expect_load_error(dir, "", "bad regex");
  spit(dir / "tokenizer.json",
       R"({"normalizer": {"type": "NFKC"}, "model": {"vocab": {"a": 0}, "merges": []}})");
  expect_load_error(dir, "tokenizer.json", "normalizer type 'NFKC'");
  fs::remove(dir / "tokenizer.json");
  spit(dir / "tokenizer.model", "IQ== 0\nIg== x\n");
  expect_load_error(dir, "tokenizer.model", "line 2: bad rank");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace unillm::io
