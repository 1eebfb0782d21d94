// Tokens added after load (add_tokens / set_eos_token, as LLaMA-Factory's add_tokens,
// add_special_tokens and template fix): ids appended after the vocabulary, encode/decode honour
// them, and save_files writes HF files that load back with the same ids. transformers' own
// reading of the saved files is checked in tests/reference/vocab_check.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "io/tokenizer.h"
#include "support/expect.h"
#include "support/run_cli.h"

namespace unillm::io {
namespace {

using testing::expect_throw_with;
using testing::slurp;

std::string stories_dir() { return testing::source_path("assets/stories260K"); }

TEST(TokenizerAdded, SpecialTokensGetTheNextIdsAndSplitTheText) {
  auto tok = Tokenizer::load(stories_dir());
  ASSERT_EQ(tok->vocab_size(), 512);
  EXPECT_EQ(tok->add_tokens({"<|im_end|>", "<|im_start|>", "<s>"}, true), 2);  // <s> exists
  EXPECT_EQ(tok->vocab_size(), 514);
  EXPECT_EQ(tok->token_to_id("<|im_end|>"), 512);
  EXPECT_EQ(tok->token_to_id("<|im_start|>"), 513);
  EXPECT_EQ(tok->token_to_id("<s>"), 1);
  EXPECT_TRUE(tok->is_special(512));
  EXPECT_EQ(tok->added_since_load(), (std::vector<int32_t>{512, 513}));
  EncodeOptions eo;
  eo.add_special_tokens = false;
  eo.parse_special = true;
  const std::string text = "<|im_start|>user\nOnce upon a time<|im_end|>";
  const auto ids = tok->encode(text, eo);
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids.front(), 513);
  EXPECT_EQ(ids.back(), 512);
  // The text between the tokens is encoded as a segment of its own (as HF splits on them).
  const auto mid = tok->encode("user\nOnce upon a time", eo);
  EXPECT_EQ(std::vector<int32_t>(ids.begin() + 1, ids.end() - 1), mid);
  // Each segment gets the SentencePiece prefix space, as in transformers (vocab_check.py).
  EXPECT_EQ(tok->decode(ids), "<|im_start|> user\nOnce upon a time<|im_end|>");
  EXPECT_EQ(tok->decode(ids, true), "user\nOnce upon a time");
  // Without parse_special the token text is ordinary text.
  eo.parse_special = false;
  const auto plain = tok->encode(text, eo);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 512), 0);
}

TEST(TokenizerAdded, NonSpecialTokensAlwaysSplit) {
  auto tok = Tokenizer::load(stories_dir());
  EXPECT_EQ(tok->add_tokens({"[NEW]"}, false), 1);
  EXPECT_FALSE(tok->is_special(512));
  const auto ids = tok->encode("a [NEW] b", {false, false});
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 512), 1);
  EXPECT_NE(tok->decode(ids, true).find("[NEW]"), std::string::npos);  // not special: kept
  expect_throw_with<ConfigError>([&] { tok->add_tokens({""}, true); }, "empty token");
}

TEST(TokenizerAdded, EosReplacement) {
  auto tok = Tokenizer::load(stories_dir());
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_TRUE(tok->set_eos_token("<|im_end|>"));
  EXPECT_EQ(tok->eos_id(), 512);
  const auto stops = tok->stop_ids();
  EXPECT_NE(std::find(stops.begin(), stops.end(), 512), stops.end());
  EXPECT_FALSE(tok->set_eos_token("</s>"));  // exists: made the EOS, nothing added
  EXPECT_EQ(tok->eos_id(), 2);
}

TEST(TokenizerAdded, SavedFilesLoadBackWithTheSameIds) {
  for (const std::string src : {stories_dir(), testing::source_path("assets/llama2-tokenizer")}) {
    auto tok = Tokenizer::load(src);
    const int32_t v = tok->vocab_size();
    tok->add_tokens({"[NEW]"}, false);
    tok->set_eos_token("<|im_end|>");
    tok->add_tokens({"<|im_start|>"}, true);
    const std::string dst = testing::temp_dir("tok_added");
    tok->save_files(src, dst);
    auto back = Tokenizer::load(dst);
    EXPECT_EQ(back->vocab_size(), v + 3) << src;
    EXPECT_EQ(back->token_to_id("[NEW]"), v) << src;
    EXPECT_EQ(back->token_to_id("<|im_end|>"), v + 1) << src;
    EXPECT_EQ(back->eos_id(), v + 1) << src;
    EXPECT_TRUE(back->is_special(v + 2)) << src;
    EXPECT_FALSE(back->is_special(v)) << src;
    EncodeOptions eo;
    eo.parse_special = true;
    const std::string text = "<|im_start|>Hi [NEW] there<|im_end|>\nand more";
    EXPECT_EQ(back->encode(text, eo), tok->encode(text, eo)) << src;
    const auto cfg = nlohmann::json::parse(slurp(dst + "/tokenizer_config.json"));
    EXPECT_EQ(cfg.at("eos_token"), "<|im_end|>");
    EXPECT_EQ(cfg.at("additional_special_tokens"), nlohmann::json::array({"<|im_start|>"}));
    EXPECT_EQ(cfg.at("added_tokens_decoder").at(std::to_string(v)).at("special"), false);
    // The loaded tokenizer's own added_since_load is empty: the tokens are part of its files now.
    EXPECT_TRUE(back->added_since_load().empty());
  }
}

// HF's split_special_tokens: special-token strings stay text even under parse_special; non-special
// added tokens still split; save_files writes the setting and a reload honours it (transformers'
// reading of such a save: tests/reference/vocab_check.py).
TEST(TokenizerAdded, SplitSpecialTokensKeepsSpecialStringsAsText) {
  auto tok = Tokenizer::load(stories_dir());
  EXPECT_FALSE(tok->split_special_tokens());
  EXPECT_FALSE(tok->modified_since_load());
  tok->add_tokens({"[NEW]"}, false);
  EncodeOptions special;
  special.add_special_tokens = false;
  special.parse_special = true;
  EncodeOptions plain = special;
  plain.parse_special = false;
  const std::string text = "Lily</s>Tom [NEW] ran";
  const auto parsed = tok->encode(text, special);
  EXPECT_NE(std::find(parsed.begin(), parsed.end(), tok->eos_id()), parsed.end());
  tok->set_split_special_tokens(true);
  EXPECT_TRUE(tok->modified_since_load());
  const auto split = tok->encode(text, special);
  EXPECT_EQ(split, tok->encode(text, plain));
  EXPECT_NE(split, parsed);
  EXPECT_EQ(std::find(split.begin(), split.end(), tok->eos_id()), split.end());
  EXPECT_NE(std::find(split.begin(), split.end(), *tok->token_to_id("[NEW]")), split.end());
  const std::string dst = testing::temp_dir("tok_split");
  tok->save_files(stories_dir(), dst);
  EXPECT_EQ(nlohmann::json::parse(slurp(dst + "/tokenizer_config.json"))["split_special_tokens"], true);
  auto back = Tokenizer::load(dst);
  EXPECT_TRUE(back->split_special_tokens());
  EXPECT_EQ(back->encode(text, special), split);
  EXPECT_FALSE(back->modified_since_load());
}

}  // namespace
}  // namespace unillm::io
