// jinja2's lexer rules, re-derived: text runs up to the next "{{", "{%" or "{#"; a "-" after the
// opener strips the text's trailing whitespace, lstrip_blocks strips a block or comment tag's
// indentation when the tag starts a line; "%}" and "#}" eat one newline (trim_blocks), "-%}"
// and "-}}" all following whitespace. Inside a tag, end markers only count outside brackets.
#include "io/jinja/lexer.h"

#include <cstring>

#include "core/error.h"

namespace unillm::jinja {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }

void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Python's newline normalisation and keep_trailing_newline=False.
std::string normalise(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\r') {
      out += '\n';
      if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
    } else {
      out += s[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  Lexer(const std::string& src, const std::string& name) : src_(normalise(src)), name_(name) {}

  std::vector<Token> run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      size_t p = next_tag(pos_);
      if (p == std::string::npos) {
        emit(Tok::Text, src_.substr(pos_), line_);
        break;
      }
      char kind = src_[p + 1];
      char sign = p + 2 < src_.size() ? src_[p + 2] : 0;
      bool has_sign = sign == '-' || sign == '+';
      std::string text = src_.substr(pos_, p - pos_);
      if (sign == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      } else if (sign != '+' && kind != '{') {  // lstrip_blocks
        size_t l = text.rfind('\n');
        l = l == std::string::npos ? 0 : l + 1;
        bool blank = l < text.size();
        for (size_t i = l; i < text.size(); ++i) blank = blank && is_space(text[i]);
        if ((l > 0 || line_starting) && blank) text.resize(l);
      }
      if (!text.empty()) emit(Tok::Text, text, line_);
      advance(p + 2 + (has_sign ? 1 : 0));
      if (kind == '#')
        comment();
      else
        tag(kind == '{');
      line_starting = src_[pos_ - 1] == '\n';
    }
    emit(Tok::Eof, "", line_);
    return std::move(out_);
  }

 private:
  [[noreturn]] void fail(const std::string& msg, int line) {
    UNILLM_THROW(ConfigError, "[jinja] ", name_, " line ", line, ": ", msg);
  }
  void emit(Tok k, std::string text, int line) { out_.push_back({k, std::move(text), line}); }
  void advance(size_t p) {
    for (; pos_ < p; ++pos_) line_ += src_[pos_] == '\n';
  }
  bool at(const char* s) const { return src_.compare(pos_, std::strlen(s), s) == 0; }
  void skip_space() {
    while (pos_ < src_.size() && is_space(src_[pos_])) advance(pos_ + 1);
  }

  size_t next_tag(size_t from) const {
    for (size_t p = src_.find('{', from); p != std::string::npos; p = src_.find('{', p + 1))
      if (p + 1 < src_.size() && std::strchr("{%#", src_[p + 1]) && src_[p + 1] != 0) return p;
    return std::string::npos;
  }

  void comment() {
    int start = line_;
    for (size_t i = pos_; i + 1 < src_.size(); ++i) {
      bool marked = (src_[i] == '-' || src_[i] == '+') && src_.compare(i + 1, 2, "#}") == 0;
      if (!marked && src_.compare(i, 2, "#}") != 0) continue;
      char sign = marked ? src_[i] : 0;
      advance(i + (marked ? 3 : 2));
      if (sign == '-')
        skip_space();
      else if (!sign && pos_ < src_.size() && src_[pos_] == '\n')
        advance(pos_ + 1);
      return;
    }
    fail("comment opened here is never closed with '#}'", start);
  }

  // Tokens of one {{ ... }} or {% ... %}, through its end marker.
  void tag(bool is_var) {
    int start = line_;
    emit(is_var ? Tok::VarBegin : Tok::BlockBegin, "", line_);
    std::string brackets;
    for (;;) {
      skip_space();
      if (pos_ >= src_.size())
        fail(std::string("tag opened here is never closed with '") + (is_var ? "}}'" : "%}'"),
             start);
      if (brackets.empty() && end_marker(is_var)) return;
      char c = src_[pos_];
      if (is_name_start(c))
        name();
      else if (is_digit(c))
        number();
      else if (c == '\'' || c == '"')
        string(c);
      else
        op(brackets);
    }
  }

  bool end_marker(bool is_var) {
    const char* close = is_var ? "}}" : "%}";
    Tok k = is_var ? Tok::VarEnd : Tok::BlockEnd;
    if ((src_[pos_] == '-' || (!is_var && src_[pos_] == '+')) &&
        src_.compare(pos_ + 1, 2, close) == 0) {
      char sign = src_[pos_];
      emit(k, "", line_);
      advance(pos_ + 3);
      if (sign == '-') skip_space();
      return true;
    }
    if (!at(close)) return false;
    emit(k, "", line_);
    advance(pos_ + 2);
    if (!is_var && pos_ < src_.size() && src_[pos_] == '\n') advance(pos_ + 1);  // trim_blocks
    return true;
  }

  void name() {
    size_t e = pos_;
    while (e < src_.size() && (is_name_start(src_[e]) || is_digit(src_[e]))) ++e;
    emit(Tok::Name, src_.substr(pos_, e - pos_), line_);
    advance(e);
  }

  size_t digits_end(size_t e) const {  // digits with single '_' separators, as jinja2 allows
    while (e < src_.size() &&
           (is_digit(src_[e]) || (src_[e] == '_' && e + 1 < src_.size() && is_digit(src_[e + 1]))))
      ++e;
    return e;
  }

  void number() {
    size_t e = digits_end(pos_);
    bool is_float = false;
    bool after_dot = !out_.empty() && out_.back().kind == Tok::Op && out_.back().text == ".";
    if (!after_dot && e + 1 < src_.size() && src_[e] == '.' && is_digit(src_[e + 1])) {
      e = digits_end(e + 1);
      is_float = true;
    }
    if (!after_dot && e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t x = e + 1;
      if (x < src_.size() && (src_[x] == '+' || src_[x] == '-')) ++x;
      if (x < src_.size() && is_digit(src_[x])) e = digits_end(x), is_float = true;
    }
    std::string text;
    for (size_t i = pos_; i < e; ++i)
      if (src_[i] != '_') text += src_[i];
    emit(is_float ? Tok::Float : Tok::Int, text, line_);
    advance(e);
  }

  uint32_t hex(size_t from, size_t n, int line) {
    if (from + n > src_.size()) fail("truncated \\x/\\u escape in string", line);
    uint32_t v = 0;
    for (size_t i = from; i < from + n; ++i) {
      char c = src_[i];
      int d = is_digit(c)              ? c - '0'
              : (c >= 'a' && c <= 'f') ? c - 'a' + 10
              : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                       : -1;
      if (d < 0) fail("bad hex digit in string escape", line);
      v = v * 16 + d;
    }
    return v;
  }

  // A quoted string with Python's escapes (jinja2 decodes with 'unicode-escape').
  void string(char q) {
    int start = line_;
    std::string value;
    size_t i = pos_ + 1;
    for (;; ++i) {
      if (i >= src_.size()) fail("string opened here is never closed", start);
      char c = src_[i];
      if (c == q) break;
      if (c != '\\') {
        value += c;
        continue;
      }
      if (++i >= src_.size()) fail("string opened here is never closed", start);
      char e = src_[i];
      switch (e) {
        case '\n':
          break;
        case '\\':
        case '\'':
        case '"':
          value += e;
          break;
        case 'a':
          value += '\a';
          break;
        case 'b':
          value += '\b';
          break;
        case 'f':
          value += '\f';
          break;
        case 'n':
          value += '\n';
          break;
        case 'r':
          value += '\r';
          break;
        case 't':
          value += '\t';
          break;
        case 'v':
          value += '\v';
          break;
        case 'x':
          append_utf8(hex(i + 1, 2, start), value);
          i += 2;
          break;
        case 'u':
          append_utf8(hex(i + 1, 4, start), value);
          i += 4;
          break;
        case 'U': {
          uint32_t cp = hex(i + 1, 8, start);
          if (cp > 0x10FFFF) fail("\\U escape out of range", start);
          append_utf8(cp, value);
          i += 8;
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t v = 0;
            size_t k = 0;
            for (; k < 3 && i + k < src_.size() && src_[i + k] >= '0' && src_[i + k] <= '7'; ++k)
              v = v * 8 + (src_[i + k] - '0');
            append_utf8(v, value);
            i += k - 1;
          } else {
            value += '\\';
            value += e;
          }
      }
    }
    emit(Tok::String, value, start);
    advance(i + 1);
  }

  void op(std::string& brackets) {
    static const char* kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
    for (const char* t : kTwo)
      if (at(t)) {
        emit(Tok::Op, t, line_);
        advance(pos_ + 2);
        return;
      }
    char c = src_[pos_];
    if (!std::strchr("+-/*%~[](){}<>=.:|,;", c) || c == 0)
      fail(std::string("unexpected character '") + c + "' in tag", line_);
    if (c == '(' || c == '[' || c == '{') brackets += c;
    if (c == ')' || c == ']' || c == '}') {
      char want = c == ')' ? '(' : c == ']' ? '[' : '{';
      if (brackets.empty() || brackets.back() != want)
        fail(std::string("unexpected '") + c + "'", line_);
      brackets.pop_back();
    }
    emit(Tok::Op, std::string(1, c), line_);
    advance(pos_ + 1);
  }

  std::string src_;
  const std::string& name_;
  std::vector<Token> out_;
  size_t pos_ = 0;
  int line_ = 1;
};

}  // namespace

std::vector<Token> lex(const std::string& source, const std::string& name) {
  return Lexer(source, name).run();
}

}  // namespace unillm::jinja
