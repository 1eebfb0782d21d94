// jieba's accurate mode with HMM (see jieba.h), following jieba/__init__.py: gen_pfdict, get_DAG,
// calc (route ties go to the longer word, as Python's max over (logp, end) tuples) and __cut_DAG.
#include "eval/jieba.h"

#include <cmath>
#include <fstream>

#include "core/error.h"
#include "eval/text.h"

namespace unillm::eval {

namespace {
// re_han_default's class: [\u4E00-\u9FD5a-zA-Z0-9+#&\._%\-].
bool in_han_class(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FD5) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '+' || c == '#' || c == '&' || c == '.' || c == '_' ||
         c == '%' || c == '-';
}

bool is_ascii_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}
}  // namespace

Jieba Jieba::load(const std::string& dir) {
  Jieba j;
  const std::string path = dir + "/dict.txt";
  std::ifstream in(path, std::ios::binary);
  if (!in) UNILLM_THROW(IoError, "[jieba] cannot open ", path, " (the jieba assets: assets/jieba)");
  j.freq_.reserve(600000);
  int64_t total = 0, lineno = 0;
  std::string line;
  while (std::getline(in, line)) {
    ++lineno;
    // gen_pfdict: line.strip() (bytes: ASCII whitespace), then "word freq" before the tag.
    size_t b = 0, e = line.size();
    while (b < e && is_ascii_ws(line[b])) ++b;
    while (e > b && is_ascii_ws(line[e - 1])) --e;
    const std::string_view s(line.data() + b, e - b);
    const size_t sp = s.find(' ');
    const size_t sp2 = sp == std::string_view::npos ? sp : s.find(' ', sp + 1);
    const std::string_view num =
        sp == std::string_view::npos ? std::string_view{} : s.substr(sp + 1, sp2 - sp - 1);
    bool digits = !num.empty() && num.size() < 19;
    for (char c : num) digits = digits && c >= '0' && c <= '9';
    if (!digits)
      UNILLM_THROW(ConfigError, "[jieba] ", path, " line ", lineno, ": expected 'word freq [tag]'");
    const std::u32string word = utf8_to_u32(s.substr(0, sp));
    const int64_t f = std::stoll(std::string(num));
    j.freq_[word] = f;
    total += f;
    for (size_t n = 1; n < word.size(); ++n) j.freq_.try_emplace(word.substr(0, n), 0);
  }
  if (total <= 0) UNILLM_THROW(ConfigError, "[jieba] ", path, ": no words with a frequency");
  j.log_total_ = std::log(static_cast<double>(total));
  j.hmm_ = JiebaHmm::load(dir + "/hmm.tsv");
  return j;
}

int64_t Jieba::freq(std::u32string_view w) const {
  const auto it = freq_.find(std::u32string(w));
  return it == freq_.end() ? 0 : it->second;
}

std::vector<std::u32string> Jieba::cut(std::u32string_view s) const {
  std::vector<std::u32string> out;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = i;
    if (in_han_class(s[i])) {
      while (j < s.size() && in_han_class(s[j])) ++j;
      cut_block(s.substr(i, j - i), out);
    } else {
      // re_skip_default split: "\r\n" and each whitespace are tokens; other characters one each.
      j = i + (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n' ? 2 : 1);
      out.emplace_back(s.substr(i, j - i));
    }
    i = j;
  }
  return out;
}

std::vector<std::string> Jieba::cut_utf8(std::string_view s) const {
  std::vector<std::string> out;
  for (const auto& w : cut(utf8_to_u32(s))) out.push_back(u32_to_utf8(w));
  return out;
}

void Jieba::flush_singles(const std::u32string& buf, std::vector<std::u32string>& out) const {
  if (buf.size() == 1) {
    out.push_back(buf);
  } else if (freq(buf) == 0) {
    hmm_.cut(buf, out);  // not a dictionary word: the HMM may find words in it
  } else {
    for (char32_t c : buf) out.emplace_back(1, c);
  }
}

// __cut_DAG: the best route, with runs of single-character steps gathered for the HMM.
void Jieba::cut_block(std::u32string_view s, std::vector<std::u32string>& out) const {
  const size_t n = s.size();
  // get_DAG: ends of the dictionary words starting at k (k itself when there is none).
  std::vector<std::vector<size_t>> dag(n);
  std::u32string frag;
  for (size_t k = 0; k < n; ++k) {
    frag.assign(1, s[k]);
    for (size_t i = k; i < n;) {
      const auto it = freq_.find(frag);
      if (it == freq_.end()) break;
      if (it->second) dag[k].push_back(i);
      ++i;
      if (i < n) frag.push_back(s[i]);
    }
    if (dag[k].empty()) dag[k].push_back(k);
  }
  // calc: route[k] = max over ends x of (log(freq or 1) - log_total + route[x + 1]).
  std::vector<double> score(n + 1, 0.0);
  std::vector<size_t> end(n + 1, 0);
  for (size_t k = n; k-- > 0;) {
    bool first = true;
    for (size_t x : dag[k]) {
      const int64_t f = freq(s.substr(k, x + 1 - k));
      const double p = std::log(static_cast<double>(f ? f : 1)) - log_total_ + score[x + 1];
      if (first || p > score[k] || (p == score[k] && x > end[k])) {
        score[k] = p;
        end[k] = x;
        first = false;
      }
    }
  }
  std::u32string buf;
  for (size_t x = 0; x < n;) {
    const size_t y = end[x] + 1;
    if (y - x == 1) {
      buf.push_back(s[x]);
    } else {
      if (!buf.empty()) flush_singles(buf, out);
      buf.clear();
      out.emplace_back(s.substr(x, y - x));
    }
    x = y;
  }
  if (!buf.empty()) flush_singles(buf, out);
}

}  // namespace unillm::eval
