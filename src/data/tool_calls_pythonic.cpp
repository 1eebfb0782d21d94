// LFM2's tool-call reader: "<|tool_call_start|>[f(a=1, b="x"), g()]<|tool_call_end|>", Python
// call syntax that LLaMA-Factory reads with ast.parse + ast.literal_eval. A small recursive
// parser for the part of Python's expression grammar such calls use; what falls outside it is
// read as plain text, as LLaMA-Factory does for what ast rejects.
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "data/tool_calls_internal.h"
#include "io/tokenizer_unicode.h"

namespace unillm::data::detail {
namespace {

using ojson = nlohmann::ordered_json;

// A parsed expression. kOther: valid in the subset but not a literal (bytes, complex, a set,
// Ellipsis, a unary sign on a non-number): literal_eval or json.dumps would refuse it.
struct Node {
  enum Kind { kConst, kName, kList, kTuple, kDict, kCall, kOther } kind = kOther;
  ojson value;                        // kConst
  std::string name;                   // kName; kCall: the function name
  std::vector<Node> items;            // kList, kTuple; kDict: key, value, key, ...
  std::vector<std::string> kw_names;  // kCall: keyword arguments, names and values (a pair
  std::vector<Node> kw_values;        // would need Node complete)
  bool func_is_name = true;           // kCall
};

std::string strip_space(const std::string& s) {  // str.strip(), ASCII whitespace
  const char* ws = " \t\n\r\v\f\x1c\x1d\x1e\x1f";
  const size_t b = s.find_first_not_of(ws);
  return b == std::string::npos ? "" : s.substr(b, s.find_last_not_of(ws) - b + 1);
}

bool ident_start(unsigned char c) { return c == '_' || std::isalpha(c) || c >= 0x80; }
bool ident_char(unsigned char c) { return ident_start(c) || std::isdigit(c); }

bool is_keyword(const std::string& w) {
  static const char* const kWords[] = {
      "and",    "as",   "assert", "async",  "await",  "break",   "class",    "continue",
      "def",    "del",  "elif",   "else",   "except", "finally", "for",      "from",
      "global", "if",   "import", "in",     "is",     "lambda",  "nonlocal", "not",
      "or",     "pass", "raise",  "return", "try",    "while",   "with",     "yield"};
  for (const char* k : kWords)
    if (w == k) return true;
  return false;
}

class Parser {
 public:
  explicit Parser(const std::string& s) : s_(s) {}
  // The whole text as one expression; false on a syntax error (or syntax outside the subset).
  bool parse(Node& out) {
    if (!expr(out)) return false;
    space();
    return i_ == s_.size();
  }

 private:
  void space() {
    while (i_ < s_.size() &&
           (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\f'))
      ++i_;
  }
  bool eat(char c) {
    space();
    if (i_ < s_.size() && s_[i_] == c) return ++i_, true;
    return false;
  }
  bool peek(char c) {
    space();
    return i_ < s_.size() && s_[i_] == c;
  }

  bool expr(Node& n) {
    if (++depth_ > 200) return false;
    const bool ok = primary(n) && postfix(n);
    --depth_;
    return ok;
  }

  bool primary(Node& n) {
    space();
    if (i_ >= s_.size()) return false;
    const unsigned char c = s_[i_];
    if (c == '-' || c == '+') {
      ++i_;
      if (!expr(n)) return false;
      if (n.kind != Node::kConst || !n.value.is_number()) {
        n = Node();  // literal_eval takes a sign on a number only
        return true;
      }
      if (c == '-' && !negate(n.value)) n = Node();
      return true;
    }
    if (c == '[') return ++i_, sequence(n, Node::kList, ']');
    if (c == '(') return ++i_, sequence(n, Node::kTuple, ')');
    if (c == '{') return ++i_, braces(n);
    if (std::isdigit(c) ||
        (c == '.' && i_ + 1 < s_.size() && std::isdigit((unsigned char)s_[i_ + 1])))
      return number(n);
    if (c == '.' && s_.compare(i_, 3, "...") == 0) {  // Ellipsis: not JSON
      i_ += 3;
      n = Node();
      return true;
    }
    if (c == '"' || c == '\'') return strings(n, "");
    if (ident_start(c)) {
      size_t b = i_;
      while (i_ < s_.size() && ident_char(s_[i_])) ++i_;
      std::string w = s_.substr(b, i_ - b);
      if (i_ < s_.size() && (s_[i_] == '"' || s_[i_] == '\'') && w.size() <= 2)
        return strings(n, w);
      if (w == "True" || w == "False" || w == "None") {
        n.kind = Node::kConst;
        n.value = w == "None" ? ojson(nullptr) : ojson(w == "True");
        return true;
      }
      if (is_keyword(w)) return false;
      n.kind = Node::kName;
      n.name = w;
      return true;
    }
    return false;
  }

  // False when -v does not fit a 64-bit integer (unillm's JSON cannot hold it).
  static bool negate(ojson& v) {
    if (v.is_number_float()) {
      v = -v.get<double>();
    } else if (v.is_number_unsigned()) {
      const uint64_t u = v.get<uint64_t>();
      if (u > (uint64_t{1} << 63)) return false;
      v = u == 0 ? int64_t{0} : -static_cast<int64_t>(u - 1) - 1;
    } else {
      const int64_t x = v.get<int64_t>();
      if (x == INT64_MIN) return false;
      v = -x;
    }
    return true;
  }

  // Calls only: attribute access, subscripts and calls on non-names are outside the subset.
  bool postfix(Node& n) {
    space();
    if (i_ < s_.size() && (s_[i_] == '.' || s_[i_] == '[')) return false;
    if (!peek('(')) return true;
    ++i_;
    Node call;
    call.kind = Node::kCall;
    call.func_is_name = n.kind == Node::kName;
    call.name = n.name;
    while (!eat(')')) {
      space();
      if (s_.compare(i_, 1, "*") == 0) return false;  // *args / **kwargs
      size_t save = i_;
      std::string key;
      if (i_ < s_.size() && ident_start(s_[i_])) {
        size_t b = i_;
        while (i_ < s_.size() && ident_char(s_[i_])) ++i_;
        key = s_.substr(b, i_ - b);
        space();
        if (i_ < s_.size() && s_[i_] == '=' && s_.compare(i_, 2, "==") != 0) {
          if (is_keyword(key) || key == "True" || key == "False" || key == "None") return false;
          ++i_;
        } else {
          key.clear();
          i_ = save;
        }
      }
      Node arg;
      if (!expr(arg)) return false;
      if (!key.empty()) {
        call.kw_names.push_back(key);
        call.kw_values.push_back(std::move(arg));
      } else if (!call.kw_names.empty()) {
        return false;  // positional after keyword
      }
      if (!eat(',') && !peek(')')) return false;
    }
    n = std::move(call);
    return postfix(n);
  }

  bool sequence(Node& n, Node::Kind kind, char close) {
    n = Node();
    n.kind = kind;
    bool comma = false;
    while (!eat(close)) {
      Node item;
      if (!expr(item)) return false;
      n.items.push_back(std::move(item));
      comma = eat(',');
      if (!comma && !peek(close)) return false;
    }
    if (kind == Node::kTuple && n.items.size() == 1 && !comma) {
      Node inner = std::move(n.items[0]);  // (x) is x
      n = std::move(inner);
    }
    return true;
  }

  bool braces(Node& n) {  // a dict, or a set (not a literal JSON can hold)
    n = Node();
    n.kind = Node::kDict;
    bool set = false;
    while (!eat('}')) {
      Node key, value;
      if (!expr(key)) return false;
      if (eat(':')) {
        if (set || !expr(value)) return false;
        n.items.push_back(std::move(key));
        n.items.push_back(std::move(value));
      } else {
        if (!n.items.empty()) return false;
        set = true;
      }
      if (!eat(',') && !peek('}')) return false;
    }
    if (set) n = Node();
    return true;
  }

  bool number(Node& n) {
    size_t b = i_;
    std::string digits;
    bool is_float = false, based = false;
    if (s_[i_] == '0' && i_ + 1 < s_.size() && std::strchr("xXoObB", s_[i_ + 1]))
      based = true, i_ += 2;
    while (i_ < s_.size() &&
           (std::isalnum((unsigned char)s_[i_]) || s_[i_] == '_' || s_[i_] == '.' ||
            ((s_[i_] == '+' || s_[i_] == '-') && !based && !digits.empty() &&
             (digits.back() == 'e' || digits.back() == 'E')))) {
      if (s_[i_] != '_') digits += s_[i_];
      if (!based && (s_[i_] == '.' || s_[i_] == 'e' || s_[i_] == 'E')) is_float = true;
      ++i_;
    }
    n = Node();
    if (!digits.empty() && (digits.back() == 'j' || digits.back() == 'J')) return true;  // complex
    const char* p = digits.c_str();
    char* end = nullptr;
    errno = 0;
    if (is_float) {
      n.value = std::strtod(p, &end);
    } else {
      const int base = based ? std::tolower(s_[b + 1]) == 'x'   ? 16
                               : std::tolower(s_[b + 1]) == 'o' ? 8
                                                                : 2
                             : 10;
      const unsigned long long v = std::strtoull(p, &end, base);
      if (errno == ERANGE) return true;  // beyond 64 bits: unillm's JSON cannot hold it
      n.value = static_cast<uint64_t>(v);
      if (v <= static_cast<unsigned long long>(INT64_MAX)) n.value = static_cast<int64_t>(v);
    }
    if (end != p + digits.size() || digits.empty()) return false;
    n.kind = Node::kConst;
    return true;
  }

  // One or more adjacent string literals (Python concatenates them); prefix r/u (any case);
  // b or f prefixes make a value JSON or literal_eval refuses.
  bool strings(Node& n, const std::string& prefix) {
    std::string text;
    bool literal = true;
    std::string pre = prefix;
    for (;;) {
      bool raw = false;
      for (char c : pre) {
        const char l = static_cast<char>(std::tolower(c));
        if (l == 'r')
          raw = true;
        else if (l == 'b' || l == 'f')
          literal = false;
        else if (l != 'u')
          return false;
      }
      if (!one_string(raw, text)) return false;
      space();
      size_t b = i_;
      while (i_ < s_.size() && std::isalpha((unsigned char)s_[i_]) && i_ - b < 2) ++i_;
      if (i_ < s_.size() && (s_[i_] == '"' || s_[i_] == '\'')) {
        pre = s_.substr(b, i_ - b);
        continue;
      }
      i_ = b;
      break;
    }
    n = Node();
    if (literal) {
      n.kind = Node::kConst;
      n.value = text;
    }
    return true;
  }

  bool one_string(bool raw, std::string& out) {
    const char q = s_[i_];
    const bool triple = s_.compare(i_, 3, std::string(3, q)) == 0;
    i_ += triple ? 3 : 1;
    for (;;) {
      if (i_ >= s_.size()) return false;
      const char c = s_[i_];
      if (c == q && (!triple || s_.compare(i_, 3, std::string(3, q)) == 0))
        return i_ += triple ? 3 : 1, true;
      if (c == '\n' && !triple) return false;
      if (c != '\\') {
        out += c;
        ++i_;
        continue;
      }
      if (i_ + 1 >= s_.size()) return false;
      if (raw) {
        out += c;
        out += s_[i_ + 1];
        i_ += 2;
        continue;
      }
      if (!escape(out)) return false;
    }
  }

  bool escape(std::string& out) {
    const char e = s_[i_ + 1];
    i_ += 2;
    const char* simple = "\\\\''\"\"a\ab\bf\fn\nr\rt\tv\v";
    for (const char* p = simple; *p; p += 2)
      if (*p == e) return out += p[1], true;
    if (e == '\n') return true;  // a line continuation
    if (e >= '0' && e <= '7') {
      uint32_t v = e - '0';
      for (int k = 0; k < 2 && i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '7'; ++k)
        v = v * 8 + (s_[i_++] - '0');
      return io::unicode::append_utf8(out, v), true;
    }
    const int len = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
    if (len == 0) {
      if (e == 'N') return false;  // \N{name}: outside the subset
      out += '\\';
      out += e;
      return true;
    }
    if (i_ + len > s_.size()) return false;
    uint32_t v = 0;
    for (int k = 0; k < len; ++k) {
      const char h = s_[i_ + k];
      if (!std::isxdigit((unsigned char)h)) return false;
      v = v * 16 + (std::isdigit((unsigned char)h) ? h - '0' : std::tolower(h) - 'a' + 10);
    }
    i_ += len;
    if (v > 0x10FFFF || (v >= 0xD800 && v < 0xE000)) return false;  // no UTF-8 spelling
    io::unicode::append_utf8(out, v);
    return true;
  }

  const std::string& s_;
  size_t i_ = 0;
  int depth_ = 0;
};

// ast.literal_eval then json.dumps's view of the value; false where either would fail.
bool to_json(const Node& n, bool top, ojson& out) {
  switch (n.kind) {
    case Node::kConst:
      out = n.value;
      return true;
    case Node::kName:  // LFM2's JSON-style words, only as a keyword's whole value
      if (!top) return false;
      if (n.name == "true" || n.name == "false") return out = (n.name == "true"), true;
      if (n.name == "null") return out = nullptr, true;
      return false;
    case Node::kList:
    case Node::kTuple:
      out = ojson::array();
      for (const Node& x : n.items) {
        ojson v;
        if (!to_json(x, false, v)) return false;
        out.push_back(std::move(v));
      }
      return true;
    case Node::kDict:
      out = ojson::object();
      for (size_t k = 0; k + 1 < n.items.size(); k += 2) {
        ojson key, v;
        if (!to_json(n.items[k], false, key) || key.is_structured() ||
            !to_json(n.items[k + 1], false, v))
          return false;  // a list key is unhashable in Python
        // json.dumps's key conversion: str as is, True -> "true", None -> "null", numbers printed
        const std::string name = key.is_string()    ? key.get<std::string>()
                                 : key.is_boolean() ? (key.get<bool>() ? "true" : "false")
                                 : key.is_null()    ? "null"
                                                    : py_json_dumps(key);
        out[name] = std::move(v);
      }
      return true;
    default:
      return false;
  }
}

}  // namespace

std::optional<std::vector<FunctionCall>> extract_lfm2(const std::string& s) {
  const std::string open = "<|tool_call_start|>", close = "<|tool_call_end|>";
  const size_t a = s.find(open);
  if (a == std::string::npos) return std::nullopt;
  const size_t e = s.find(close, a);
  if (e == std::string::npos) return std::nullopt;
  const std::string body = strip_space(s.substr(a + open.size(), e - a - open.size()));
  Node tree;
  if (!Parser(body).parse(tree)) return std::nullopt;
  std::vector<Node> calls;
  if (tree.kind == Node::kList)
    calls = std::move(tree.items);
  else if (tree.kind == Node::kCall)
    calls.push_back(std::move(tree));
  else
    return std::nullopt;
  std::vector<FunctionCall> out;
  for (const Node& c : calls) {
    if (c.kind != Node::kCall || !c.func_is_name) return std::nullopt;
    ojson args = ojson::object();
    for (size_t k = 0; k < c.kw_names.size(); ++k) {
      ojson v;
      if (!to_json(c.kw_values[k], true, v)) return std::nullopt;
      args[c.kw_names[k]] = std::move(v);
    }
    out.push_back({c.name, py_json_dumps(args)});
  }
  if (out.empty()) return std::nullopt;
  return out;
}

}  // namespace unillm::data::detail
