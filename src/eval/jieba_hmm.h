// jieba's finalseg: the BMES hidden Markov model that segments runs of characters the dictionary
// does not know (jieba/finalseg/__init__.py, re-implemented; tables from assets/jieba/hmm.tsv).
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace unillm::eval {

class JiebaHmm {
 public:
  // Reads hmm.tsv (tools/jieba_tables.py's format); ConfigError names path:line on a bad line.
  static JiebaHmm load(const std::string& path);

  // finalseg.cut(s): Han runs (U+4E00..U+9FD5) by Viterbi; elsewhere alnum runs (with an optional
  // ".digits" and "%") stay whole and the text between them is one piece. Appends to OUT.
  void cut(std::u32string_view s, std::vector<std::u32string>& out) const;

  // The state sequence ('B','M','E','S') Viterbi picks for OBS (all Han); for tests.
  std::string viterbi(std::u32string_view obs) const;

 private:
  void cut_han(std::u32string_view s, std::vector<std::u32string>& out) const;
  double emit(int state, char32_t c) const;

  std::array<double, 4> start_{};                 // by state index B, M, E, S
  std::array<std::array<double, 4>, 4> trans_{};  // [from][to]
  std::array<std::unordered_map<char32_t, double>, 4> emit_;
};

}  // namespace unillm::eval
