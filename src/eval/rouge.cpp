// rouge-chinese's get_scores (see rouge.h), following rouge_chinese/rouge.py and rouge_score.py:
// n-gram sets (Rouge's default exclusive=True) for ROUGE-N, the plain LCS table for ROUGE-L.
#include "eval/rouge.h"

#include <algorithm>
#include <functional>
#include <set>

#include "core/error.h"
#include "eval/text.h"

namespace unillm::eval {

namespace {
using CharClass = std::function<bool(char32_t)>;

bool is_end(char32_t c) { return c == U'。' || c == U'！' || c == U'？' || c == U'?'; }
bool not_close_quote(char32_t c) { return c != U'”' && c != U'’'; }

// re.sub(PATTERN, r"\1\n\2", s) for a fixed-length PATTERN given as one class per character,
// the newline going before the last one (the second group is always one character).
std::u32string insert_breaks(std::u32string_view s, const std::vector<CharClass>& pattern) {
  const size_t len = pattern.size();
  std::u32string out;
  size_t i = 0;
  while (i < s.size()) {
    bool match = i + len <= s.size();
    for (size_t k = 0; match && k < len; ++k) match = pattern[k](s[i + k]);
    if (!match) {
      out.push_back(s[i++]);
      continue;
    }
    out.append(s.substr(i, len - 1));
    out.push_back(U'\n');
    out.push_back(s[i + len - 1]);
    i += len;
  }
  return out;
}

std::vector<std::u32string> words_of(const std::vector<std::u32string>& sentences) {
  std::vector<std::u32string> words;  // _split_into_words: s.split(" "), empty pieces kept
  for (const auto& s : sentences) {
    size_t b = 0;
    for (size_t e; (e = s.find(U' ', b)) != std::u32string::npos; b = e + 1)
      words.push_back(s.substr(b, e - b));
    words.push_back(s.substr(b));
  }
  return words;
}

double f_score(double p, double r) { return 2.0 * ((p * r) / (p + r + 1e-8)); }

double rouge_n(const std::vector<std::u32string>& hyp, const std::vector<std::u32string>& ref,
               size_t n) {
  auto grams = [n](const std::vector<std::u32string>& w) {
    std::set<std::vector<std::u32string>> g;
    for (size_t i = 0; i + n <= w.size(); ++i) g.emplace(w.begin() + i, w.begin() + i + n);
    return g;
  };
  const auto h = grams(hyp), r = grams(ref);
  size_t overlap = 0;
  for (const auto& g : h) overlap += r.count(g);
  const double p = h.empty() ? 0.0 : static_cast<double>(overlap) / static_cast<double>(h.size());
  const double rc = r.empty() ? 0.0 : static_cast<double>(overlap) / static_cast<double>(r.size());
  return f_score(p, rc);
}

double rouge_l(const std::vector<std::u32string>& hyp, const std::vector<std::u32string>& ref) {
  std::vector<size_t> prev(hyp.size() + 1, 0), cur(hyp.size() + 1, 0);
  for (size_t i = 1; i <= ref.size(); ++i) {
    for (size_t j = 1; j <= hyp.size(); ++j)
      cur[j] = ref[i - 1] == hyp[j - 1] ? prev[j - 1] + 1 : std::max(prev[j], cur[j - 1]);
    std::swap(prev, cur);
  }
  const double lcs = static_cast<double>(prev[hyp.size()]);
  const double r = lcs / static_cast<double>(ref.size());
  const double p = lcs / static_cast<double>(hyp.size());
  return f_score(p, r);
}
}  // namespace

std::vector<std::u32string> rouge_sentences(std::u32string_view text) {
  const CharClass any_end = is_end, nq = not_close_quote;
  const CharClass dot = [](char32_t c) { return c == U'.'; };
  const CharClass ellipsis = [](char32_t c) { return c == U'…'; };
  const CharClass close_quote = [](char32_t c) { return !not_close_quote(c); };
  const CharClass not_end = [](char32_t c) { return c != U'，' && !is_end(c); };
  std::u32string s = insert_breaks(text, {any_end, nq});
  s = insert_breaks(s, {dot, dot, dot, dot, dot, dot, nq});
  s = insert_breaks(s, {ellipsis, ellipsis, nq});
  s = insert_breaks(s, {any_end, close_quote, not_end});
  while (!s.empty() && is_py_space(s.back())) s.pop_back();  // para.rstrip()
  std::vector<std::u32string> out;
  size_t b = 0;
  for (;;) {
    const size_t e = s.find(U'\n', b);
    const std::u32string piece =
        s.substr(b, e == std::u32string::npos ? std::u32string::npos : e - b);
    if (!piece.empty()) {  // the filter runs before the join: a blank piece becomes ""
      std::u32string joined;
      for (const auto& w : py_split_ws(piece)) joined += (joined.empty() ? U"" : U" ") + w;
      out.push_back(joined);
    }
    if (e == std::u32string::npos) break;
    b = e + 1;
  }
  return out;
}

RougeScores rouge_scores(std::u32string_view hyp, std::u32string_view ref) {
  const auto hs = rouge_sentences(hyp), rs = rouge_sentences(ref);
  if (hs.empty() || rs.empty())
    UNILLM_THROW(Error, "[rouge] ", hs.empty() ? "hypothesis" : "reference", " is empty");
  const auto hw = words_of(hs), rw = words_of(rs);
  return {rouge_n(hw, rw, 1), rouge_n(hw, rw, 2), rouge_l(hw, rw)};
}

}  // namespace unillm::eval
