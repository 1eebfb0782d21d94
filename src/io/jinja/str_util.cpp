// Python string semantics on UTF-8 text, by code point where Python indexes by code point.
#include "io/jinja/str_util.h"

#include <cctype>

#include "io/jinja/builtins.h"

namespace unillm::jinja {
namespace {

char up(char c) { return static_cast<char>(std::toupper(static_cast<unsigned char>(c))); }
char low(char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); }
bool alpha(char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; }

// Python's str.splitlines() boundaries (the ASCII ones).
std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '\n' || c == '\r' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e)) {
      if (c == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

}  // namespace

bool py_space(const std::string& ch) {
  if (ch.size() == 1) {
    char c = ch[0];
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
  }
  return ch == "\xc2\x85" || ch == "\xc2\xa0" || ch == "\xe3\x80\x80" ||
         (ch.size() == 3 && ch[0] == '\xe2' && ch[1] == '\x80' &&
          ((ch[2] >= '\x80' && ch[2] <= '\x8a') || ch[2] == '\xa8' || ch[2] == '\xa9' ||
           ch[2] == '\xaf'));
}

std::string py_strip(const std::string& s, const std::string* chars, bool left, bool right) {
  std::vector<std::string> cs = utf8_chars(s);
  std::vector<std::string> set = chars ? utf8_chars(*chars) : std::vector<std::string>{};
  auto strip_me = [&](const std::string& c) {
    if (!chars) return py_space(c);
    for (const auto& x : set)
      if (x == c) return true;
    return false;
  };
  size_t b = 0, e = cs.size();
  if (left)
    while (b < e && strip_me(cs[b])) ++b;
  if (right)
    while (e > b && strip_me(cs[e - 1])) --e;
  std::string out;
  for (size_t i = b; i < e; ++i) out += cs[i];
  return out;
}

std::vector<std::string> py_split(const std::string& s, const std::string* sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) throw EvalError("empty separator");
    size_t pos = 0;
    for (size_t hit; (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) &&
                     (hit = s.find(*sep, pos)) != std::string::npos;
         pos = hit + sep->size())
      out.push_back(s.substr(pos, hit - pos));
    out.push_back(s.substr(pos));
    return out;
  }
  std::vector<std::string> cs = utf8_chars(s);
  size_t i = 0;
  while (i < cs.size()) {
    while (i < cs.size() && py_space(cs[i])) ++i;
    if (i == cs.size()) break;
    std::string word;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      size_t e = cs.size();
      while (e > i && py_space(cs[e - 1])) --e;
      for (; i < e; ++i) word += cs[i];
      out.push_back(word);
      break;
    }
    while (i < cs.size() && !py_space(cs[i])) word += cs[i++];
    out.push_back(word);
  }
  return out;
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& repl,
                       int64_t count) {
  std::string out;
  int64_t done = 0;
  if (old.empty()) {
    std::vector<std::string> cs = utf8_chars(s);
    for (size_t i = 0; i <= cs.size(); ++i) {
      if (count < 0 || done < count) out += repl, ++done;
      if (i < cs.size()) out += cs[i];
    }
    return out;
  }
  size_t pos = 0;
  for (size_t hit; (count < 0 || done < count) && (hit = s.find(old, pos)) != std::string::npos;
       ++done) {
    out += s.substr(pos, hit - pos) + repl;
    pos = hit + old.size();
  }
  return out + s.substr(pos);
}

int64_t py_find(const std::string& s, const std::string& sub, const std::string& how) {
  if (how == "count") {
    if (sub.empty()) return static_cast<int64_t>(utf8_length(s)) + 1;
    int64_t n = 0;
    for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
    return n;
  }
  size_t p = how == "rfind" ? s.rfind(sub) : s.find(sub);
  if (p == std::string::npos) {
    if (how == "index") throw EvalError("substring not found");
    return -1;
  }
  return static_cast<int64_t>(utf8_length(s.substr(0, p)));
}

Value str_transform(const std::string& s, const std::string& how) {
  std::string out = s;
  if (how == "upper") {
    for (char& c : out) c = up(c);
  } else if (how == "lower") {
    for (char& c : out) c = low(c);
  } else if (how == "title") {
    bool prev_cased = false;
    for (char& c : out) {
      bool is_alpha = alpha(c);
      if (is_alpha) c = prev_cased ? low(c) : up(c);
      prev_cased = is_alpha || (static_cast<unsigned char>(c) >= 0x80 && prev_cased);
    }
  } else if (how == "capitalize") {
    for (size_t i = 0; i < out.size(); ++i) out[i] = i == 0 ? up(out[i]) : low(out[i]);
  } else if (how == "splitlines") {
    List l;
    for (auto& line : split_lines(s)) l.emplace_back(line);
    return Value::list(std::move(l));
  } else {  // isdigit / isspace / isalpha
    if (s.empty()) return Value(false);
    for (const std::string& ch : utf8_chars(s)) {
      bool ok = how == "isspace" ? py_space(ch)
                : how == "isdigit"
                    ? (ch.size() == 1 && std::isdigit(static_cast<unsigned char>(ch[0])))
                    : (ch.size() > 1 || alpha(ch[0]));
      if (!ok) return Value(false);
    }
    return Value(true);
  }
  return Value(std::move(out));
}

std::string jinja_title(const std::string& s) {
  std::string out;
  bool word_start = true;
  for (const std::string& ch : utf8_chars(s)) {
    bool sep =
        py_space(ch) || (ch.size() == 1 && std::string("-({[<").find(ch[0]) != std::string::npos);
    if (sep) {
      out += ch;
      word_start = true;
      continue;
    }
    out += ch.size() == 1 ? std::string(1, word_start ? up(ch[0]) : low(ch[0])) : ch;
    word_start = false;
  }
  return out;
}

std::string py_center(const std::string& s, int64_t width) {
  int64_t len = static_cast<int64_t>(utf8_length(s));
  if (width <= len) return s;
  if (width > (1 << 24)) throw EvalError("center() width too large");
  int64_t marg = width - len;
  int64_t left = marg / 2 + (marg & width & 1);
  return std::string(left, ' ') + s + std::string(marg - left, ' ');
}

std::string jinja_indent(const std::string& s, const std::string& unit, bool first, bool blank) {
  std::vector<std::string> lines = split_lines(s + "\n");
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + unit : "") + lines[i];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i)
      rv += "\n" + (lines[i].empty() ? "" : unit + lines[i]);
  }
  return first ? unit + rv : rv;
}

int64_t word_count(const std::string& s) {
  int64_t n = 0;
  bool in_word = false;
  for (unsigned char c : s) {
    bool w = std::isalnum(c) || c == '_' || c >= 0x80;
    if (w && !in_word) ++n;
    in_word = w;
  }
  return n;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace unillm::jinja
