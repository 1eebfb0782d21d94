// Value construction, Python-style printing (str/repr), equality and ordering, and json.dumps as
// transformers' tojson calls it. Printing must match CPython byte for byte: templates print ints,
// floats, booleans and whole lists.
#include "io/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace unillm::jinja {

const Value* CallArgs::get(size_t i, const char* name) const {
  if (i < pos.size()) return &pos[i];
  for (const auto& [k, v] : kw)
    if (k == name) return &v;
  return nullptr;
}

Value Value::list(List items, bool tuple) {
  Value v(Kind::List);
  v.list_ = std::make_shared<List>(std::move(items));
  v.flag_ = tuple;
  return v;
}

Value Value::generator(List items) {
  Value v = list(std::move(items));
  v.flag_ = 2;
  return v;
}

Value Value::dict(Dict items, bool is_namespace) {
  Value v(Kind::Dict);
  v.dict_ = std::make_shared<Dict>(std::move(items));
  v.flag_ = is_namespace;
  return v;
}

Value Value::function(std::string name, Function fn) {
  Value v(Kind::Function);
  v.s_ = std::make_shared<std::string>(std::move(name));
  v.fn_ = std::make_shared<Function>(std::move(fn));
  return v;
}

Value Value::from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      for (auto it = j.begin(); it != j.end(); ++it)
        d.emplace_back(Value(it.key()), from_json(it.value()));
      return dict(std::move(d));
    }
    case nlohmann::ordered_json::value_t::array: {
      List l;
      for (const auto& e : j) l.push_back(from_json(e));
      return list(std::move(l));
    }
    case nlohmann::ordered_json::value_t::string:
      return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::boolean:
      return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned:
      return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_float:
      return Value(j.get<double>());
    default:
      return none();
  }
}

static bool same_key(const Value& a, const Value& b) {
  if (a.is_string() && b.is_string()) return a.str() == b.str();
  return !a.is_string() && !b.is_string() && values_equal(a, b);
}

const Value* Value::find(const Value& key) const {
  for (const auto& [k, v] : *dict_)
    if (same_key(k, key)) return &v;
  return nullptr;
}

void Value::set(const Value& key, Value v) const {
  for (auto& [k, old] : *dict_)
    if (same_key(k, key)) {
      old = std::move(v);
      return;
    }
  dict_->emplace_back(key, std::move(v));
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None:
      return false;
    case Kind::Bool:
    case Kind::Int:
      return i_ != 0;
    case Kind::Float:
      return f_ != 0;
    case Kind::String:
      return !s_->empty();
    case Kind::List:
      return flag_ == 2 || !list_->empty();
    case Kind::Dict:
      return flag_ || !dict_->empty();  // a namespace object is always true
    default:
      return true;
  }
}

std::string format_float(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::scientific);
  std::string s(buf, res.ptr);  // shortest round-trip digits: "-1.25e+02"
  std::string sign;
  if (s[0] == '-') sign = "-", s = s.substr(1);
  size_t e = s.find('e');
  int exp = std::stoi(s.substr(e + 1));
  std::string digits = s.substr(0, e);
  if (digits.size() > 1) digits.erase(1, 1);  // drop the '.'
  int n = static_cast<int>(digits.size());
  if (exp < -4 || exp >= 16) {  // CPython's repr switches to exponent form here
    std::string out = sign + digits.substr(0, 1);
    if (n > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    return out + eb;
  }
  if (exp < 0) return sign + "0." + std::string(-exp - 1, '0') + digits;
  std::string ip = n > exp + 1 ? digits.substr(0, exp + 1) : digits + std::string(exp + 1 - n, '0');
  std::string fp = n > exp + 1 ? digits.substr(exp + 1) : "0";
  return sign + ip + "." + fp;
}

std::vector<std::string> utf8_chars(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (i + len > s.size()) len = 1;
    for (size_t k = 1; k < len; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) len = 1;
    out.push_back(s.substr(i, len));
    i += len;
  }
  return out;
}

size_t utf8_length(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

static std::string repr_string(const std::string& s) {
  char q = (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
  std::string out(1, q);
  for (const std::string& ch : utf8_chars(s)) {
    unsigned char c = static_cast<unsigned char>(ch[0]);
    char buf[8];
    if (ch.size() == 1 && (c == static_cast<unsigned char>(q) || c == '\\'))
      out += '\\', out += ch;
    else if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\t')
      out += "\\t";
    else if (ch.size() == 1 && (c < 0x20 || c == 0x7f)) {
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else if (ch.size() == 2 && c == 0xC2 && static_cast<unsigned char>(ch[1]) <= 0xA0) {
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(ch[1]));  // C1, NBSP
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + q;
}

std::string Value::repr() const {
  switch (kind_) {
    case Kind::Undefined:
      return "Undefined";
    case Kind::String:
      return repr_string(*s_);
    default:
      return to_str();
  }
}

std::string Value::to_str() const {
  switch (kind_) {
    case Kind::Undefined:
      return "";
    case Kind::None:
      return "None";
    case Kind::Bool:
      return i_ ? "True" : "False";
    case Kind::Int:
      return std::to_string(i_);
    case Kind::Float:
      return format_float(f_);
    case Kind::String:
      return *s_;
    case Kind::List: {
      if (flag_ == 2) return "<generator object>";
      std::string out = flag_ ? "(" : "[";
      for (size_t i = 0; i < list_->size(); ++i) out += (i ? ", " : "") + (*list_)[i].repr();
      if (flag_ && list_->size() == 1) out += ",";
      return out + (flag_ ? ")" : "]");
    }
    case Kind::Dict: {
      std::string out = flag_ ? "<Namespace {" : "{";
      for (size_t i = 0; i < dict_->size(); ++i)
        out += (i ? ", " : "") + (*dict_)[i].first.repr() + ": " + (*dict_)[i].second.repr();
      return out + (flag_ ? "}>" : "}");
    }
    case Kind::Function:
      return "<function " + *s_ + ">";
  }
  return "";
}

nlohmann::ordered_json Value::to_json() const {
  return nlohmann::ordered_json::parse(dump_json(*this, DumpOptions{}));
}

const char* kind_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
      return "Undefined";
    case Value::Kind::None:
      return "NoneType";
    case Value::Kind::Bool:
      return "bool";
    case Value::Kind::Int:
      return "int";
    case Value::Kind::Float:
      return "float";
    case Value::Kind::String:
      return "str";
    case Value::Kind::List:
      return v.is_tuple() ? "tuple" : v.is_generator() ? "generator" : "list";
    case Value::Kind::Dict:
      return v.is_namespace() ? "Namespace" : "dict";
    case Value::Kind::Function:
      return "function";
  }
  return "?";
}

bool values_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None:
      return true;
    case Value::Kind::String:
      return a.str() == b.str();
    case Value::Kind::List: {
      if (a.is_tuple() != b.is_tuple() || a.items().size() != b.items().size()) return false;
      for (size_t i = 0; i < a.items().size(); ++i)
        if (!values_equal(a.items()[i], b.items()[i])) return false;
      return true;
    }
    case Value::Kind::Dict: {
      if (a.is_namespace() || b.is_namespace()) return &a.entries() == &b.entries();
      if (a.entries().size() != b.entries().size()) return false;
      for (const auto& [k, v] : a.entries()) {
        const Value* o = b.find(k);
        if (!o || !values_equal(v, *o)) return false;
      }
      return true;
    }
    case Value::Kind::Function:
      return &a.fn() == &b.fn();
    default:
      return false;
  }
}

bool value_less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() < b.as_float();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const List& x = a.items();
    const List& y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (value_less(x[i], y[i])) return true;
      if (value_less(y[i], x[i])) return false;
    }
    return x.size() < y.size();
  }
  throw std::invalid_argument(std::string("'<' not supported between instances of '") +
                              kind_name(a) + "' and '" + kind_name(b) + "'");
}

static void dump_string(const std::string& s, bool ensure_ascii, std::string& out) {
  out += '"';
  for (const std::string& ch : utf8_chars(s)) {
    unsigned char c = static_cast<unsigned char>(ch[0]);
    char buf[16];
    switch (c) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    if (c < 0x20 || (ensure_ascii && c >= 0x80 && ch.size() == 1)) {
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else if (ensure_ascii && ch.size() > 1) {
      uint32_t cp = c & (0x7F >> ch.size());
      for (size_t k = 1; k < ch.size(); ++k) cp = (cp << 6) | (ch[k] & 0x3F);
      if (cp >= 0x10000) {
        cp -= 0x10000;
        std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xD800 + (cp >> 10),
                      0xDC00 + (cp & 0x3FF));
      } else {
        std::snprintf(buf, sizeof buf, "\\u%04x", cp);
      }
      out += buf;
    } else {
      out += ch;
    }
  }
  out += '"';
}

// json.dumps turns non-string keys into text: 1 -> "1", True -> "true", None -> "null".
static std::string json_key(const Value& k) {
  if (k.is_string()) return k.str();
  if (k.is_bool()) return k.as_bool() ? "true" : "false";
  if (k.is_none()) return "null";
  return k.to_str();
}

static void dump(const Value& v, const DumpOptions& o, int depth, std::string& out) {
  if (depth > 200) throw std::invalid_argument("tojson: nesting deeper than 200");
  bool pretty = o.indent >= 0 || !o.indent_str.empty();
  std::string unit =
      o.indent_str.empty() ? std::string(o.indent < 0 ? 0 : o.indent, ' ') : o.indent_str;
  std::string item_sep = o.item_sep.empty() ? (pretty ? "," : ", ") : o.item_sep;
  std::string key_sep = o.key_sep.empty() ? ": " : o.key_sep;
  auto newline = [&](int d) {
    out += '\n';
    for (int i = 0; i < d; ++i) out += unit;
  };
  switch (v.kind()) {
    case Value::Kind::None:
      out += "null";
      return;
    case Value::Kind::Bool:
      out += v.as_bool() ? "true" : "false";
      return;
    case Value::Kind::Int:
      out += std::to_string(v.as_int());
      return;
    case Value::Kind::Float: {
      double f = v.as_float();
      out += std::isnan(f)   ? "NaN"
             : std::isinf(f) ? (f > 0 ? "Infinity" : "-Infinity")
                             : format_float(f);
      return;
    }
    case Value::Kind::String:
      dump_string(v.str(), o.ensure_ascii, out);
      return;
    case Value::Kind::List: {
      if (v.is_generator())
        throw std::invalid_argument("Object of type generator is not JSON serializable");
      if (v.items().empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < v.items().size(); ++i) {
        if (i) out += item_sep;
        if (pretty) newline(depth + 1);
        dump(v.items()[i], o, depth + 1, out);
      }
      if (pretty) newline(depth);
      out += ']';
      return;
    }
    case Value::Kind::Dict: {
      if (v.is_namespace())
        throw std::invalid_argument("Object of type Namespace is not JSON serializable");
      if (v.entries().empty()) {
        out += "{}";
        return;
      }
      Dict entries = v.entries();
      if (o.sort_keys)
        std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
          return json_key(a.first) < json_key(b.first);
        });
      out += '{';
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) out += item_sep;
        if (pretty) newline(depth + 1);
        dump_string(json_key(entries[i].first), o.ensure_ascii, out);
        out += key_sep;
        dump(entries[i].second, o, depth + 1, out);
      }
      if (pretty) newline(depth);
      out += '}';
      return;
    }
    default:
      throw std::invalid_argument(std::string("Object of type ") + kind_name(v) +
                                  " is not JSON serializable");
  }
}

std::string dump_json(const Value& v, const DumpOptions& o) {
  std::string out;
  dump(v, o, 0, out);
  return out;
}

}  // namespace unillm::jinja
