// SentencePiece BPE (Llama 2): agreement with libsentencepiece (an independent reference, linked
// only into this test) on the alpaca subset, the HF tokenizer.json layouts of the same model, BOS
// rules, parse_special, and malformed .model files.
#include <gtest/gtest.h>
#include <sentencepiece_processor.h>

#include <algorithm>
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

std::string llama2_dir() { return testing::source_path("tests/data/llama2-tokenizer"); }

using testing::slurp;

using testing::fresh_dir;
using testing::spit;

// Every instruction / input / output field of the alpaca subset, and each of their lines.
std::vector<std::string> alpaca_texts(bool split_lines) {
  json recs =
      json::parse(slurp(testing::source_path("tests/data/alpaca-subset/alpaca_en_demo_head.json")));
  std::vector<std::string> out;
  for (const auto& r : recs)
    for (const char* key : {"instruction", "input", "output"}) {
      std::string s = r.at(key).get<std::string>();
      if (!split_lines) {
        if (!s.empty()) out.push_back(s);
        continue;
      }
      std::istringstream ls(s);
      for (std::string line; std::getline(ls, line);)
        if (!line.empty()) out.push_back(line);
    }
  return out;
}

std::vector<int32_t> sp_encode(const sentencepiece::SentencePieceProcessor& sp,
                               const std::string& s) {
  std::vector<int> ids;
  EXPECT_TRUE(sp.Encode(s, &ids).ok());
  return {ids.begin(), ids.end()};
}

TEST(TokenizerSpm, MatchesLibSentencePieceOnAlpaca) {
  auto tok = Tokenizer::load(llama2_dir());
  sentencepiece::SentencePieceProcessor sp;
  ASSERT_TRUE(sp.Load(llama2_dir() + "/tokenizer.model").ok());
  ASSERT_EQ(tok->vocab_size(), sp.GetPieceSize());
  size_t n = 0, ok = 0, bytes = 0;
  for (bool lines : {true, false}) {
    for (const std::string& s : alpaca_texts(lines)) {
      std::vector<int32_t> want = sp_encode(sp, s);
      std::vector<int32_t> got = tok->encode(s, {.add_special_tokens = false});
      ++n, bytes += s.size();
      if (got == want) {
        ++ok;
        EXPECT_EQ(tok->decode(got), sp.DecodeIds(std::vector<int>(want.begin(), want.end())));
      } else if (n - ok <= 3) {
        ADD_FAILURE() << "mismatch on: " << s;
      }
    }
  }
  std::printf("[ spm ] %zu/%zu texts (%zu bytes) agree with libsentencepiece\n", ok, n, bytes);
  EXPECT_EQ(ok, n);
  EXPECT_GT(n, 3000u);
}

// The tokenizer.json HF's convert_slow_tokenizer writes for Llama 2 (legacy layout), made from
// libsentencepiece's view of the model; merges follow HF's SentencePieceExtractor.
json hf_llama_json(bool metaspace) {
  sentencepiece::SentencePieceProcessor sp;
  EXPECT_TRUE(sp.Load(llama2_dir() + "/tokenizer.model").ok());
  json vocab = json::object();
  std::vector<std::pair<std::string, float>> scores;
  for (int i = 0; i < sp.GetPieceSize(); ++i) {
    vocab[sp.IdToPiece(i)] = i;
    scores.emplace_back(sp.IdToPiece(i), sp.GetScore(i));
  }
  struct M {
    std::string l, r;
    float score;
  };
  std::vector<M> merges;
  for (const auto& [piece, score] : scores) {
    std::vector<M> local;
    for (size_t k = 1; k < piece.size(); ++k) {
      if ((static_cast<unsigned char>(piece[k]) & 0xC0) == 0x80) continue;  // split on characters
      std::string l = piece.substr(0, k), r = piece.substr(k);
      if (vocab.contains(l) && vocab.contains(r)) local.push_back({l, r, score});
    }
    std::sort(local.begin(), local.end(), [&](const M& a, const M& b) {
      return std::pair(vocab[a.l].get<int>(), vocab[a.r].get<int>()) <
             std::pair(vocab[b.l].get<int>(), vocab[b.r].get<int>());
    });
    merges.insert(merges.end(), local.begin(), local.end());
  }
  std::stable_sort(merges.begin(), merges.end(),
                   [](const M& a, const M& b) { return a.score > b.score; });
  json jm = json::array();
  for (const M& m : merges) jm.push_back({m.l, m.r});
  json j;
  j["version"] = "1.0";
  j["added_tokens"] = json::array();
  for (int id : {0, 1, 2})
    j["added_tokens"].push_back({{"id", id},
                                 {"content", sp.IdToPiece(id)},
                                 {"single_word", false},
                                 {"lstrip", false},
                                 {"rstrip", false},
                                 {"normalized", false},
                                 {"special", true}});
  j["model"] = {{"type", "BPE"},    {"dropout", nullptr},    {"unk_token", "<unk>"},
                {"fuse_unk", true}, {"byte_fallback", true}, {"vocab", vocab},
                {"merges", jm}};
  json replace = {{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}};
  if (metaspace) {
    j["normalizer"] = nullptr;
    j["pre_tokenizer"] = {{"type", "Metaspace"},
                          {"replacement", "\xE2\x96\x81"},
                          {"prepend_scheme", "first"},
                          {"split", false}};
    j["decoder"] = {{"type", "Sequence"},
                    {"decoders",
                     {replace,
                      {{"type", "ByteFallback"}},
                      {{"type", "Fuse"}},
                      {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  } else {
    j["normalizer"] = {
        {"type", "Sequence"},
        {"normalizers",
         {{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}}}};
    j["pre_tokenizer"] = nullptr;
    j["decoder"] = {{"type", "Sequence"},
                    {"decoders",
                     {replace,
                      {{"type", "ByteFallback"}},
                      {{"type", "Fuse"}},
                      {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  }
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single",
       {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}};
  return j;
}

TEST(TokenizerSpm, TokenizerJsonLayoutsMatchModel) {
  auto model = Tokenizer::load(llama2_dir());
  for (bool metaspace : {false, true}) {
    fs::path dir = fresh_dir(metaspace ? "metaspace" : "legacy");
    spit((dir / "tokenizer.json").string(), hf_llama_json(metaspace).dump());
    auto tj = Tokenizer::load(dir.string());
    EXPECT_EQ(tj->vocab_size(), 32000);
    EXPECT_EQ(tj->bos_id(), 1);
    EXPECT_TRUE(tj->adds_bos());
    size_t n = 0, ok = 0;
    for (const std::string& s : alpaca_texts(false)) {
      ++n;
      auto want = model->encode(s);
      auto got = tj->encode(s);
      if (got == want)
        ++ok;
      else if (n - ok <= 3)
        ADD_FAILURE() << (metaspace ? "metaspace" : "legacy") << " mismatch on: " << s;
      if (n % 50 == 0) EXPECT_EQ(tj->decode(got, true), model->decode(want, true));
    }
    EXPECT_EQ(ok, n);
    EXPECT_EQ(tj->decode(tj->encode("Hello world \xF0\x9F\x98\x80"), true),
              "Hello world \xF0\x9F\x98\x80");
    // HF's Metaspace does not prepend a second "▁" to text that starts with a space; legacy does.
    std::vector<int32_t> lead = tj->encode(" Hello", {.add_special_tokens = false});
    EXPECT_EQ(lead, model->encode(metaspace ? "Hello" : " Hello", {.add_special_tokens = false}));
    fs::remove_all(dir);
  }
}

TEST(TokenizerSpm, BosRulesAndConfigOverride) {
  auto tok = Tokenizer::load(llama2_dir());
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_TRUE(tok->adds_bos());
  EXPECT_EQ(tok->encode("Hello world"), (std::vector<int32_t>{1, 15043, 3186}));
  EXPECT_EQ(tok->encode(""), (std::vector<int32_t>{1}));
  EXPECT_EQ(tok->encode("Hello world", {.add_special_tokens = false}),
            (std::vector<int32_t>{15043, 3186}));
  EXPECT_EQ(tok->id_to_token(15043), "\xE2\x96\x81Hello");
  EXPECT_EQ(tok->token_to_id("<0x0A>"), 13);
  EXPECT_TRUE(tok->is_special(1) && tok->is_special(0) && !tok->is_special(15043));

  fs::path dir = fresh_dir("bos");
  fs::copy_file(llama2_dir() + "/tokenizer.model", dir / "tokenizer.model");
  spit(
      (dir / "tokenizer_config.json").string(),
      R"({"add_bos_token": false, "add_eos_token": true, "bos_token": "<s>", "eos_token": {"content": "</s>"}})");
  spit((dir / "generation_config.json").string(),
       R"({"bos_token_id": 1, "eos_token_id": [2, 13]})");
  auto cfg = Tokenizer::load(dir.string());
  EXPECT_FALSE(cfg->adds_bos());
  EXPECT_EQ(cfg->encode("Hello world"), (std::vector<int32_t>{15043, 3186, 2}));
  EXPECT_EQ(cfg->stop_ids(), (std::vector<int32_t>{2, 13}));
  fs::remove_all(dir);
}

TEST(TokenizerSpm, ParseSpecial) {
  auto tok = Tokenizer::load(llama2_dir());
  sentencepiece::SentencePieceProcessor sp;
  ASSERT_TRUE(sp.Load(llama2_dir() + "/tokenizer.model").ok());
  const std::string text = "<s>Hello</s>";
  std::vector<int32_t> plain = tok->encode(text, {.add_special_tokens = false});
  EXPECT_EQ(plain, sp_encode(sp, text));  // ordinary text by default
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 1), 0);
  std::vector<int32_t> parsed =
      tok->encode(text, {.add_special_tokens = false, .parse_special = true});
  EXPECT_EQ(parsed, (std::vector<int32_t>{1, 15043, 2}));
  EXPECT_EQ(tok->decode(parsed), "<s> Hello</s>");
  EXPECT_EQ(tok->decode(parsed, true), "Hello");
  EXPECT_EQ(tok->decode(plain), text);
}

TEST(TokenizerSpm, MalformedModelThrows) {
  std::string model = slurp(llama2_dir() + "/tokenizer.model");
  fs::path dir = fresh_dir("bad_model");
  auto expect_io_error = [&](const std::string& bytes, const std::string& needle) {
    spit((dir / "tokenizer.model").string(), bytes);
    try {
      Tokenizer::load(dir.string());
      ADD_FAILURE() << "no error for " << needle;
    } catch (const IoError& e) {
      std::string what = e.what();
      EXPECT_NE(what.find("tokenizer.model"), std::string::npos) << what;
      EXPECT_NE(what.find(needle), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  };
  expect_io_error(model.substr(0, 1000), "truncated");
  expect_io_error(model.substr(0, model.size() - 7), "truncated");
  expect_io_error(std::string("\x0A\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF", 11), "protobuf");
  expect_io_error("", "no pieces");
  expect_io_error(std::string("\x0B", 1), "wire type");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace unillm::io
