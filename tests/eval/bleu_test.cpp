// eval::sentence_bleu4 on hand-worked cases (expected values derived by hand below, and equal to
// NLTK 3.10.4's sentence_bleu with method3) and eval::py_fsum.
#include "eval/bleu.h"

#include <gtest/gtest.h>

#include <cmath>

namespace unillm::eval {
namespace {

TEST(Bleu, IdenticalIsOne) { EXPECT_EQ(sentence_bleu4(U"今天天气很好", U"今天天气很好"), 1.0); }

TEST(Bleu, NoUnigramMatchOrEmptyIsZero) {
  EXPECT_EQ(sentence_bleu4(U"abc", U"xyz"), 0.0);
  EXPECT_EQ(sentence_bleu4(U"abc", U""), 0.0);
  EXPECT_EQ(sentence_bleu4(U"", U"abc"), 0.0);
}

TEST(Bleu, Method3SmoothsZeroCounts) {
  // p1 = 3/4, p2 = 2/3, p3 = 1/2, p4 = 0/1 -> 1/(2*1); equal lengths: no penalty.
  // (0.75 * 2/3 * 0.5 * 0.5)^(1/4) = 0.125^(1/4).
  EXPECT_NEAR(sentence_bleu4(U"abcd", U"abce"), std::pow(0.125, 0.25), 1e-15);
  EXPECT_EQ(sentence_bleu4(U"abcd", U"abce"), 0.5946035575013605);  // NLTK's double
  // Clipping: "aaaa" vs "ab": p1 = 1/4; p2 = 0/3 -> 1/6, p3 = 0/2 -> 1/8, p4 = 0/1 -> 1/8.
  EXPECT_NEAR(sentence_bleu4(U"ab", U"aaaa"), std::pow(1.0 / 4 / 6 / 8 / 8, 0.25), 1e-15);
}

TEST(Bleu, BrevityPenalty) {
  // Every precision 1, hypothesis 4 of 6 characters: exp(1 - 6/4).
  EXPECT_NEAR(sentence_bleu4(U"abcdef", U"abcd"), std::exp(-0.5), 1e-16);
}

TEST(Bleu, FsumIsExactlyRounded) {
  EXPECT_EQ(py_fsum({1e100, 1.0, -1e100}), 1.0);
  EXPECT_EQ(py_fsum(std::vector<double>(10, 0.1)), 1.0);  // a plain loop gives 0.9999999999999999
  EXPECT_EQ(py_fsum({}), 0.0);
  EXPECT_EQ(py_fsum({1.0, 1e-16, 1e-16}), 1.0000000000000002);  // the half-even fix-up
}

}  // namespace
}  // namespace unillm::eval
