// JSON array / JSON lines record splitting with line numbers (see json_records.h).
#include "data/json_records.h"

namespace unillm::data {

namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// Walks a top-level array, tracking strings (with escapes) and nested brackets; an element ends
// at a ',' or ']' outside any nesting. Elements are not parsed here.
class ArraySplitter {
 public:
  ArraySplitter(std::string_view s, JsonRecords& out) : s_(s), out_(out) {}

  void run(size_t open, int64_t line) {
    line_ = line;
    const int64_t open_line = line;
    for (size_t i = open + 1; i < s_.size(); ++i) {
      const char ch = s_[i];
      if (ch == '\n') ++line_;
      if (in_str_) {
        if (ch == '\\' && i + 1 < s_.size() && s_[i + 1] != '\n')
          ++i;
        else if (ch == '"')
          in_str_ = false;
        continue;
      }
      if (start_ == std::string_view::npos && !is_ws(ch)) {
        if (ch == ']' && nest_.empty() && out_.records.empty()) return trailing(i + 1);  // "[]"
        start_ = i;
        start_line_ = line_;
      }
      if (!step(ch, i)) return;
      if (done_) return trailing(i + 1);
    }
    fail(start_ == std::string_view::npos ? open_line : start_line_, "no closing ']'");
  }

 private:
  // One structural character; false after an error.
  bool step(char ch, size_t i) {
    if (ch == '"') {
      in_str_ = true;
    } else if (ch == '[' || ch == '{') {
      nest_.push_back(ch == '[' ? ']' : '}');
    } else if ((ch == ']' || ch == '}') && !nest_.empty()) {
      if (nest_.back() != ch) return fail(line_, std::string("mismatched '") + ch + "'");
      nest_.pop_back();
    } else if (ch == '}') {
      return fail(line_, "mismatched '}'");
    } else if (nest_.empty() && (ch == ',' || ch == ']')) {
      if (start_ == i) return fail(line_, "empty element");
      out_.records.push_back({s_.substr(start_, i - start_), start_line_});
      start_ = std::string_view::npos;
      done_ = ch == ']';
    }
    return true;
  }

  void trailing(size_t from) {
    for (size_t j = from; j < s_.size(); ++j) {
      if (s_[j] == '\n') ++line_;
      if (!is_ws(s_[j])) {
        fail(line_, "text after the closing ']'");
        return;
      }
    }
  }

  bool fail(int64_t line, std::string what) {
    out_.error_line = line;
    out_.error = std::move(what);
    return false;
  }

  std::string_view s_;
  JsonRecords& out_;
  std::string nest_;  // expected closers of the open brackets inside the current element
  bool in_str_ = false;
  bool done_ = false;
  size_t start_ = std::string_view::npos;
  int64_t start_line_ = 0;
  int64_t line_ = 1;
};

}  // namespace

JsonRecords split_json_records(std::string_view s) {
  JsonRecords out;
  int64_t line = 1;
  size_t i = 0;
  while (i < s.size() && is_ws(s[i])) line += s[i++] == '\n';
  if (i < s.size() && s[i] == '[') {
    ArraySplitter(s, out).run(i, line);
    return out;
  }
  line = 0;
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t nl = s.find('\n', pos);
    const size_t end = nl == std::string_view::npos ? s.size() : nl;
    std::string_view ln = s.substr(pos, end - pos);
    ++line;
    pos = nl == std::string_view::npos ? s.size() : nl + 1;
    size_t b = 0;
    while (b < ln.size() && is_ws(ln[b])) ++b;
    if (b == ln.size()) continue;  // blank lines are not records
    out.records.push_back({ln, line});
  }
  return out;
}

}  // namespace unillm::data
