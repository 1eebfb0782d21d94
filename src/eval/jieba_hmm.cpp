// jieba's finalseg HMM (see jieba_hmm.h). Sums are formed in jieba's order so the doubles match
// Python's, and ties break as Python's max over (prob, state) tuples: the later letter wins.
#include "eval/jieba_hmm.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace unillm::eval {

namespace {
constexpr double kMinFloat = -3.14e100;  // finalseg's MIN_FLOAT: the log-probability of "never"
constexpr char kStateName[4] = {'B', 'M', 'E', 'S'};
// PrevStatus: the states that may precede each state (B <- E,S; M <- M,B; E <- B,M; S <- S,E).
constexpr int kPrev[4][2] = {{2, 3}, {1, 0}, {0, 1}, {3, 2}};

int state_index(const std::string& s) {
  for (int i = 0; i < 4; ++i)
    if (s.size() == 1 && s[0] == kStateName[i]) return i;
  return -1;
}

bool is_han(char32_t c) { return c >= 0x4E00 && c <= 0x9FD5; }
bool is_alnum(char32_t c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}
bool is_digit(char32_t c) { return c >= '0' && c <= '9'; }

double parse_double(const std::string& s, bool* ok) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  *ok = !s.empty() && end == s.c_str() + s.size();
  return v;
}
}  // namespace

JiebaHmm JiebaHmm::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) UNILLM_THROW(IoError, "[jieba] cannot open ", path);
  JiebaHmm m;
  for (auto& row : m.trans_) row.fill(kMinFloat);
  m.start_.fill(kMinFloat);
  std::string line;
  int64_t lineno = 0, emits = 0;
  while (std::getline(in, line)) {
    ++lineno;
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string x; std::getline(ss, x, '\t');) f.push_back(x);
    bool ok = false;
    const std::string bad = UNILLM_MSG("[jieba] ", path, " line ", lineno, ": ");
    if (f.empty()) UNILLM_THROW(ConfigError, bad, "empty line");
    const int s = f.size() > 1 ? state_index(f[1]) : -1;
    if (s < 0) UNILLM_THROW(ConfigError, bad, "expected a state B, M, E or S in column 2");
    if (f[0] == "start" && f.size() == 3) {
      m.start_[s] = parse_double(f[2], &ok);
    } else if (f[0] == "trans" && f.size() == 4 && state_index(f[2]) >= 0) {
      m.trans_[s][state_index(f[2])] = parse_double(f[3], &ok);
    } else if (f[0] == "emit" && f.size() == 4) {
      char* end = nullptr;
      const unsigned long cp = std::strtoul(f[2].c_str(), &end, 16);
      if (f[2].empty() || *end != '\0' || cp > 0x10FFFF)
        UNILLM_THROW(ConfigError, bad, "bad code point '", f[2], "'");
      m.emit_[s][static_cast<char32_t>(cp)] = parse_double(f[3], &ok);
      ++emits;
    } else {
      UNILLM_THROW(ConfigError, bad, "expected start/trans/emit rows (tools/jieba_tables.py)");
    }
    if (!ok) UNILLM_THROW(ConfigError, bad, "bad log-probability");
  }
  if (emits == 0) UNILLM_THROW(ConfigError, "[jieba] ", path, ": no emit rows");
  return m;
}

double JiebaHmm::emit(int state, char32_t c) const {
  const auto it = emit_[state].find(c);
  return it == emit_[state].end() ? kMinFloat : it->second;
}

std::string JiebaHmm::viterbi(std::u32string_view obs) const {
  if (obs.empty()) return {};
  const size_t n = obs.size();
  std::array<double, 4> v{};
  std::vector<std::array<int, 4>> back(n);  // back[t][y]: the state before y at t
  for (int y = 0; y < 4; ++y) v[y] = start_[y] + emit(y, obs[0]);
  for (size_t t = 1; t < n; ++t) {
    std::array<double, 4> nv{};
    for (int y = 0; y < 4; ++y) {
      const double em = emit(y, obs[t]);
      int best = -1;
      double best_p = 0;
      for (int y0 : kPrev[y]) {
        const double p = v[y0] + trans_[y0][y] + em;
        if (best < 0 || p > best_p || (p == best_p && kStateName[y0] > kStateName[best])) {
          best = y0;
          best_p = p;
        }
      }
      nv[y] = best_p;
      back[t][y] = best;
    }
    v = nv;
  }
  // The last state is E or S; on a tie Python's max((p, y)) takes 'S'.
  int state = v[3] >= v[2] ? 3 : 2;
  std::string path(n, ' ');
  for (size_t t = n; t-- > 0;) {
    path[t] = kStateName[state];
    if (t > 0) state = back[t][state];
  }
  return path;
}

void JiebaHmm::cut_han(std::u32string_view s, std::vector<std::u32string>& out) const {
  const std::string pos = viterbi(s);
  size_t begin = 0, next = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (pos[i] == 'B') {
      begin = i;
    } else if (pos[i] == 'E') {
      out.emplace_back(s.substr(begin, i + 1 - begin));
      next = i + 1;
    } else if (pos[i] == 'S') {
      out.emplace_back(s.substr(i, 1));
      next = i + 1;
    }
  }
  if (next < s.size()) out.emplace_back(s.substr(next));
}

void JiebaHmm::cut(std::u32string_view s, std::vector<std::u32string>& out) const {
  size_t i = 0;
  while (i < s.size()) {
    size_t j = i;
    if (is_han(s[i])) {
      while (j < s.size() && is_han(s[j])) ++j;
      cut_han(s.substr(i, j - i), out);
      i = j;
      continue;
    }
    // A non-Han block: split by ([a-zA-Z0-9]+(?:\.\d+)?%?), keeping the non-empty pieces.
    while (j < s.size() && !is_han(s[j])) ++j;
    const std::u32string_view blk = s.substr(i, j - i);
    size_t k = 0, piece = 0;
    while (k < blk.size()) {
      if (!is_alnum(blk[k])) {
        ++k;
        continue;
      }
      size_t e = k;
      while (e < blk.size() && is_alnum(blk[e])) ++e;
      if (e + 1 < blk.size() && blk[e] == '.' && is_digit(blk[e + 1])) {
        e += 2;
        while (e < blk.size() && is_digit(blk[e])) ++e;
      }
      if (e < blk.size() && blk[e] == '%') ++e;
      if (k > piece) out.emplace_back(blk.substr(piece, k - piece));
      out.emplace_back(blk.substr(k, e - k));
      piece = k = e;
    }
    if (blk.size() > piece) out.emplace_back(blk.substr(piece));
    i = j;
  }
}

}  // namespace unillm::eval
