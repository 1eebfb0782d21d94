// eval::rouge_scores / rouge_sentences on hand-worked cases (rouge-chinese 1.0.3's semantics:
// distinct n-gram sets, LCS over all words, F = 2pr/(p + r + 1e-8)).
#include "eval/rouge.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace unillm::eval {
namespace {

double f(double p, double r) { return 2.0 * ((p * r) / (p + r + 1e-8)); }

TEST(Rouge, SentenceCuts) {
  using V = std::vector<std::u32string>;
  EXPECT_EQ(rouge_sentences(U"你好。世界！"), (V{U"你好。", U"世界！"}));
  // re.sub does not overlap matches: "？？？a" -> "？\n？？\na".
  EXPECT_EQ(rouge_sentences(U"？？？a"), (V{U"？", U"？？", U"a"}));
  // A closing quote stays with its sentence; "......" and "……" end one.
  EXPECT_EQ(rouge_sentences(U"好。”然后......走……了"),
            (V{U"好。”", U"然后......", U"走……", U"了"}));
  // Whitespace is normalised; a blank piece survives as "" (the filter runs before the join).
  EXPECT_EQ(rouge_sentences(U"好。 \n。  a\t b  "), (V{U"好。", U"", U"。", U"a b"}));
}

TEST(Rouge, HandWorkedScores) {
  // Words a b c vs a b d: unigrams 2/3 both ways, bigrams {ab, bc} vs {ab, bd}: 1/2, LCS 2.
  const RougeScores s = rouge_scores(U"a b c", U"a b d");
  EXPECT_EQ(s.rouge1, f(2.0 / 3, 2.0 / 3));
  EXPECT_EQ(s.rouge2, f(0.5, 0.5));
  EXPECT_EQ(s.rougel, f(2.0 / 3, 2.0 / 3));
  EXPECT_EQ(s.rouge1, 0.6666666616666668);  // rouge-chinese's double
}

TEST(Rouge, NgramsAreSetsButLcsCountsWords) {
  // "a a a" vs "a": the unigram sets are both {a}; the LCS is 1 of 3 hypothesis words.
  const RougeScores s = rouge_scores(U"a a a", U"a");
  EXPECT_EQ(s.rouge1, f(1, 1));
  EXPECT_EQ(s.rouge2, 0.0);
  EXPECT_EQ(s.rougel, f(1.0 / 3, 1));
}

TEST(Rouge, WordsRunAcrossSentences) {
  // Two sentences are one word list: the bigram "好。 我" spans the cut.
  const RougeScores s = rouge_scores(U"好 。 我", U"好 。 我");
  EXPECT_EQ(s.rouge2, f(1, 1));
}

TEST(Rouge, EmptyThrows) {
  EXPECT_THROW(rouge_scores(U"  ", U"a"), Error);
  EXPECT_THROW(rouge_scores(U"a", U""), Error);
}

}  // namespace
}  // namespace unillm::eval
