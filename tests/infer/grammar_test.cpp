// The byte grammar matcher: accept/reject with the state left unchanged on refusal, completion,
// left-recursion checks, ambiguous and deep grammars that must not blow up, and allowed_tokens()
// against the brute-force reference (a copy of the matcher accepting each token's bytes).
#include "infer/grammar.h"

#include <gtest/gtest.h>

#include <chrono>
#include <random>

#include "core/error.h"
#include "grammar_test_util.h"
#include "support/expect.h"

namespace unillm::infer {
namespace {

using bnf::bytes;
using bnf::lit;
using bnf::ref;
using bnf::seq;
using bnf::Symbol;
using bnf::Symbols;

using testing::brute_force_allowed;

// s ::= "ab" | "abc" | "x" digit+ ; digit ::= [0-9]
std::shared_ptr<const Grammar> small_grammar() {
  GrammarBuilder b;
  const int32_t digits = b.repeat("digits", {bytes(ByteSet::range('0', '9'))}, 1, -1);
  const int32_t s = b.add("s", {lit("ab"), lit("abc"), seq("x", ref(digits))});
  return b.build(s);
}

TEST(Grammar, AcceptsSentencesAndRefusesOthersWithoutMoving) {
  GrammarMatcher m(small_grammar());
  EXPECT_FALSE(m.complete());
  EXPECT_TRUE(m.can_continue());
  EXPECT_TRUE(m.accept("a"));
  EXPECT_FALSE(m.accept("bd"));  // 'b' fits, 'd' does not: nothing moves
  EXPECT_FALSE(m.complete());
  EXPECT_TRUE(m.accept("b"));
  EXPECT_TRUE(m.complete());
  EXPECT_TRUE(m.can_continue());  // "abc" is longer
  EXPECT_TRUE(m.accept("c"));
  EXPECT_TRUE(m.complete());
  EXPECT_FALSE(m.can_continue());
  EXPECT_FALSE(m.accept("c"));
  EXPECT_TRUE(m.accept(""));

  m.reset();
  EXPECT_TRUE(m.accept("x"));
  EXPECT_FALSE(m.complete());
  EXPECT_TRUE(m.accept("123"));
  EXPECT_TRUE(m.complete());
  EXPECT_TRUE(m.can_continue());
  EXPECT_FALSE(m.accept("4y"));
  EXPECT_TRUE(m.accept("4"));
  EXPECT_TRUE(m.complete());
}

TEST(Grammar, CopiesAreIndependent) {
  GrammarMatcher a(small_grammar());
  ASSERT_TRUE(a.accept("ab"));
  GrammarMatcher b = a;
  EXPECT_TRUE(b.accept("c"));
  EXPECT_FALSE(b.can_continue());
  EXPECT_TRUE(a.can_continue());
  EXPECT_FALSE(a.accept("x"));
}

TEST(Grammar, RepeatBounds) {
  GrammarBuilder b;
  const int32_t r = b.repeat("a{2,4}", lit("a"), 2, 4);
  auto g = b.build(r);
  for (int n = 0; n <= 5; ++n) {
    bool complete = false;
    const int at = testing::reject_at(g, std::string(n, 'a'), &complete);
    if (n <= 4) {
      EXPECT_EQ(at, -1) << n;
      EXPECT_EQ(complete, n >= 2) << n;
    } else {
      EXPECT_EQ(at, 4);
    }
  }
}

TEST(Grammar, BytesNotCodePoints) {
  // "é" is C3 A9: one symbol per byte; a token may end between them.
  GrammarBuilder b;
  const int32_t s = b.add("s", {lit("\xC3\xA9!")});
  GrammarMatcher m(b.build(s));
  EXPECT_TRUE(m.accept("\xC3"));
  EXPECT_FALSE(m.accept("\xC3"));
  EXPECT_TRUE(m.accept("\xA9"));
  EXPECT_TRUE(m.accept("!"));
  EXPECT_TRUE(m.complete());
}

TEST(Grammar, LeftRecursionAndUndefinedRulesAreRefused) {
  {
    GrammarBuilder b;
    const int32_t a = b.declare("a");
    b.define(a, {seq(ref(a), "x"), lit("y")});
    unillm::testing::expect_throw_with<ConfigError>([&] { b.build(a); }, "left recursion: a -> a");
  }
  {
    // Through a nullable rule: a ::= opt a "x" | "y"; opt ::= "" | "z".
    GrammarBuilder b;
    const int32_t opt = b.add("opt", {{}, lit("z")});
    const int32_t a = b.declare("a");
    b.define(a, {seq(ref(opt), ref(a), "x"), lit("y")});
    unillm::testing::expect_throw_with<ConfigError>([&] { b.build(a); }, "left recursion");
  }
  {
    GrammarBuilder b;
    const int32_t later = b.declare("later");
    const int32_t s = b.add("s", {seq("(", ref(later))});
    unillm::testing::expect_throw_with<ConfigError>([&] { b.build(s); },
                                                    "rule 'later' is never defined");
  }
  {
    // Right recursion and recursion after a byte are fine.
    GrammarBuilder b;
    const int32_t a = b.declare("a");
    b.define(a, {seq("(", ref(a), ")"), seq("x", ref(a)), {}});
    EXPECT_NO_THROW(b.build(a));
  }
}

TEST(Grammar, AmbiguityIsDeduplicated) {
  // s ::= x x x x x x x x "b"; x ::= "a"*: after n a's there are C(n+7, 7) parses, but only
  // 9 distinct stacks.
  GrammarBuilder b;
  const int32_t x = b.repeat("x", lit("a"), 0, -1);
  Symbols body;
  for (int i = 0; i < 8; ++i) body.push_back(ref(x));
  const int32_t s = b.add("s", {seq(body, "b")});
  GrammarMatcher m(b.build(s));
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(m.accept(std::string(2000, 'a')));
  EXPECT_FALSE(m.complete());
  ASSERT_TRUE(m.accept("b"));
  EXPECT_TRUE(m.complete());
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 0.5);
}

TEST(Grammar, TailCallsStayFlatAndNestingUnwinds) {
  // s ::= "a" s | "b": 100000 levels of right recursion in constant space.
  GrammarBuilder b;
  const int32_t s = b.declare("s");
  b.define(s, {seq("a", ref(s)), lit("b")});
  GrammarMatcher m(b.build(s));
  for (int i = 0; i < 100000; ++i) ASSERT_TRUE(m.accept("a"));
  EXPECT_TRUE(m.accept("b"));
  EXPECT_TRUE(m.complete());

  // p ::= "(" p ")" | "": the stack grows with the nesting and unwinds exactly.
  GrammarBuilder b2;
  const int32_t p = b2.declare("p");
  b2.define(p, {seq("(", ref(p), ")"), {}});
  GrammarMatcher n(b2.build(p));
  EXPECT_TRUE(n.complete());
  ASSERT_TRUE(n.accept(std::string(3000, '(')));
  ASSERT_TRUE(n.accept(std::string(2999, ')')));
  EXPECT_FALSE(n.complete());
  EXPECT_FALSE(n.accept("))"));
  EXPECT_TRUE(n.accept(")"));
  EXPECT_TRUE(n.complete());
  EXPECT_FALSE(n.can_continue());
}

TEST(TokenTrie, SharedBytesAndEmptyTokens) {
  TokenTrie trie({"a", "", "ab", "a", "b", ""});
  EXPECT_EQ(trie.size(), 6u);
  EXPECT_EQ(trie.num_nodes(), 4u);  // root, a, ab, b
  GrammarMatcher m(small_grammar());
  std::vector<uint8_t> allowed;
  m.allowed_tokens(trie, allowed);
  EXPECT_EQ(allowed, (std::vector<uint8_t>{1, 0, 1, 1, 0, 0}));
}

// A grammar of nested lists of words over a random vocabulary: allowed_tokens equals the
// brute-force reference at every prefix of several sentences.
TEST(Grammar, AllowedTokensMatchesBruteForceOnRandomVocabulary) {
  GrammarBuilder b;
  const int32_t list = b.declare("list");
  const int32_t word = b.repeat("word", {bytes(ByteSet::range('a', 'e'))}, 1, 6);
  const int32_t item = b.add("item", {{ref(word)}, {ref(list)}, seq("\xE2\x82\xAC", ref(word))});
  const int32_t more = b.repeat("more", seq(",", ref(item)), 0, -1);
  b.define(list, {seq("[", ref(item), ref(more), "]"), lit("[]")});
  auto g = b.build(list);

  std::mt19937 rng(7);
  std::vector<std::string> vocab;
  for (int c = 0; c < 256; ++c) vocab.push_back(std::string(1, static_cast<char>(c)));
  const std::string alphabet = "abcdef[],\xE2\x82\xAC";
  for (int i = 0; i < 3000; ++i) {
    std::string t(1 + rng() % 6, ' ');
    for (char& c : t) c = alphabet[rng() % alphabet.size()];
    vocab.push_back(t);
  }
  vocab.push_back("");
  TokenTrie trie(vocab);
  for (const std::string doc : {"[ab,[c,[]],\xE2\x82\xAC"
                                "dd,e]",
                                "[[[[a]]],bcde]", "[]"}) {
    GrammarMatcher m(g);
    std::vector<uint8_t> allowed;
    for (size_t i = 0; i <= doc.size(); ++i) {
      m.allowed_tokens(trie, allowed);
      ASSERT_EQ(allowed, brute_force_allowed(m, vocab)) << "after '" << doc.substr(0, i) << "'";
      if (i < doc.size()) {
        ASSERT_TRUE(m.accept(doc.substr(i, 1)));
      }
    }
    EXPECT_TRUE(m.complete());
  }
}

TEST(Grammar, ToStringListsRules) {
  const std::string text = small_grammar()->to_string();
  EXPECT_NE(text.find("s#"), std::string::npos) << text;
  EXPECT_NE(text.find("[0-9]"), std::string::npos) << text;
}

}  // namespace
}  // namespace unillm::infer
