// StreamDecoder: pieces concatenate to decode() and each ends on a UTF-8 boundary, on mixed
// CJK/emoji text for all three tokenizer kinds; and the 1 MB single-line timing sanity check.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <sstream>

#include "io/tokenizer.h"
#include "support/expect.h"

namespace unillm::io {
namespace {

const char* const kDirs[] = {"tests/data/llama2-tokenizer", "tests/data/llama3-tokenizer",
                             "tests/data/qwen2-tokenizer"};

bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    unsigned char b = s[i];
    int n = b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC2 ? 2 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (int k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

TEST(TokenizerStream, PiecesConcatenateToDecode) {
  const std::string text =
      "Hello 世界! 🙂🚀 naïve café — 日本語のテキスト 한국어 "
      "\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x92\xBB "
      "emoji: 🎉🎉 汉字汉字 ∑∫ ok\n\tend 🐍";
  for (const char* dir : kDirs) {
    auto tok = Tokenizer::load(testing::source_path(dir));
    for (bool skip : {false, true}) {
      std::vector<int32_t> ids = tok->encode(text, {.parse_special = true});
      std::string full = tok->decode(ids, skip);
      EXPECT_EQ(full, skip || !tok->adds_bos() ? text : full) << dir;
      StreamDecoder stream(*tok, skip);
      std::string joined;
      int held = 0;
      for (int32_t id : ids) {
        std::string piece = stream.push(id);
        EXPECT_TRUE(valid_utf8(piece)) << dir << " id " << id;
        held += piece.empty();
        joined += piece;
      }
      joined += stream.finish();
      EXPECT_EQ(joined, full) << dir;
      if (std::string(dir).find("llama2") != std::string::npos)
        EXPECT_GT(held, 0);  // byte fallback held back
    }
  }
}

TEST(TokenizerStream, IncompleteBytesAreHeldBackThenReplaced) {
  auto tok = Tokenizer::load(testing::source_path("tests/data/llama2-tokenizer"));
  StreamDecoder s(*tok);
  const int32_t e4 = 3 + 0xE4, bd = 3 + 0xBD, a0 = 3 + 0xA0;  // "你" as byte tokens
  EXPECT_EQ(s.push(e4), "");
  EXPECT_EQ(s.push(bd), "");
  EXPECT_EQ(s.push(a0), "你");
  EXPECT_EQ(s.push(e4), "");
  EXPECT_EQ(s.finish(), "\xEF\xBF\xBD");
  EXPECT_EQ(tok->decode({e4, bd, 15043}), "\xEF\xBF\xBD Hello");
  EXPECT_EQ(tok->decode({-5, 1 << 30, 15043}), "Hello");  // unknown ids are skipped
}

TEST(TokenizerStream, OneMegabyteLineIsFast) {
  std::ifstream f(testing::source_path("tests/data/alpaca-subset/alpaca_en_demo_head.json"));
  std::ostringstream ss;
  ss << f.rdbuf();
  std::string base = ss.str();
  for (char& c : base)
    if (c == '\n' || c == '\r') c = ' ';
  std::string english;
  while (english.size() < (1u << 20)) english += base;
  english.resize(1u << 20);
  std::string cjk;  // one 1 MB "word": no pre-tokenizer split at all
  while (cjk.size() < (1u << 20)) cjk += "汉字的文本没有空格所以是一个很长的词";
  for (const char* dir : kDirs) {
    auto tok = Tokenizer::load(testing::source_path(dir));
    for (const std::string* text : {&english, &cjk}) {
      auto t0 = std::chrono::steady_clock::now();
      std::vector<int32_t> ids = tok->encode(*text, {.add_special_tokens = false});
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("[ timing ] %s: %s 1 MB line -> %zu tokens in %.3f s\n", dir,
                  text == &english ? "English" : "CJK", ids.size(), s);
      EXPECT_LT(s, 5.0);
      EXPECT_GT(ids.size(), 1000u);
    }
  }
}

}  // namespace
}  // namespace unillm::io
