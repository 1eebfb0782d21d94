// Python's arithmetic and comparison rules on template values (int64 instead of bigints:
// overflow is an error rather than undefined behaviour).
#include "io/jinja/eval_ops.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "io/jinja/builtins.h"
#include "io/jinja/str_util.h"

namespace unillm::jinja {
namespace {

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  throw EvalError("unsupported operand type(s) for " + op + ": '" + kind_name(a) + "' and '" +
                  kind_name(b) + "'");
}

void overflow_error() { throw EvalError("integer overflow (unillm's integers are 64-bit)"); }

// Builtin-overflow wrappers returning the result (argument evaluation order stays explicit).
int64_t add(int64_t x, int64_t y) {
  int64_t r;
  if (__builtin_add_overflow(x, y, &r)) overflow_error();
  return r;
}
int64_t sub(int64_t x, int64_t y) {
  int64_t r;
  if (__builtin_sub_overflow(x, y, &r)) overflow_error();
  return r;
}
int64_t mul(int64_t x, int64_t y) {
  int64_t r;
  if (__builtin_mul_overflow(x, y, &r)) overflow_error();
  return r;
}

Value repeat(const Value& seq, int64_t n, size_t max_len) {
  if (n <= 0) return seq.is_string() ? Value("") : Value::list({}, seq.is_tuple());
  size_t unit = seq.is_string() ? seq.str().size() : seq.items().size();
  if (unit && static_cast<uint64_t>(n) > max_len / unit)
    throw EvalError("repetition result longer than " + std::to_string(max_len));
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.str();
    return Value(std::move(out));
  }
  List out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.items().begin(), seq.items().end());
  return Value::list(std::move(out), seq.is_tuple());
}

Value arith_int(const std::string& op, int64_t x, int64_t y) {
  if (op == "+") return Value(add(x, y));
  if (op == "-") return Value(sub(x, y));
  if (op == "*") return Value(mul(x, y));
  if (op == "/") {
    if (y == 0) throw EvalError("division by zero");
    return Value(static_cast<double>(x) / static_cast<double>(y));
  }
  if (op == "//" || op == "%") {
    if (y == 0) throw EvalError("integer division or modulo by zero");
    if (y == -1) return op == "%" ? Value(int64_t{0}) : Value(sub(0, x));
    int64_t q = x / y, m = x % y;
    if (m != 0 && ((m < 0) != (y < 0))) --q, m += y;  // floor, as Python
    return op == "//" ? Value(q) : Value(m);
  }
  // "**"
  if (y < 0) return Value(std::pow(static_cast<double>(x), static_cast<double>(y)));
  int64_t acc = 1, base = x;
  for (int64_t e = y; e > 0; e >>= 1) {
    if (e & 1) acc = mul(acc, base);
    if (e > 1) base = mul(base, base);
  }
  return Value(acc);
}

Value arith_float(const std::string& op, double x, double y) {
  if (op == "+") return Value(x + y);
  if (op == "-") return Value(x - y);
  if (op == "*") return Value(x * y);
  if (op == "**") return Value(std::pow(x, y));
  if (y == 0) throw EvalError("float division by zero");
  if (op == "/") return Value(x / y);
  double q = std::floor(x / y);
  if (op == "//") return Value(q);
  double m = std::fmod(x, y);
  if (m != 0 && ((m < 0) != (y < 0))) m += y;
  return Value(m);
}

bool contains(const Value& container, const Value& item) {
  if (container.is_undefined()) return false;
  if (container.is_string()) {
    if (!item.is_string())
      throw EvalError(std::string("'in <string>' requires string as left operand, not ") +
                      kind_name(item));
    return container.str().find(item.str()) != std::string::npos;
  }
  if (container.is_list()) {
    for (const Value& v : container.items())
      if (values_equal(v, item)) return true;
    return false;
  }
  if (container.is_dict() && !container.is_namespace()) return container.find(item) != nullptr;
  throw EvalError(std::string("argument of type '") + kind_name(container) + "' is not iterable");
}

// Python's printf-style `str % args` for the conversions templates use: %s %r %d %i %f %%,
// with an optional width and .precision. Anything else is an error, never a wrong text.
Value percent_format(const std::string& fmt, const Value& rhs) {
  std::vector<Value> args = rhs.is_tuple() ? rhs.items() : std::vector<Value>{rhs};
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    size_t j = i + 1;
    std::string spec;
    while (j < fmt.size() &&
           (std::isdigit(static_cast<unsigned char>(fmt[j])) || fmt[j] == '.' || fmt[j] == '-'))
      spec += fmt[j++];
    if (j >= fmt.size()) throw EvalError("incomplete format");
    char conv = fmt[j];
    i = j;
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (next >= args.size()) throw EvalError("not enough arguments for format string");
    const Value& a = args[next++];
    std::string text;
    char buf[512];
    if (conv == 's' || conv == 'r') {
      text = conv == 's' ? a.to_str() : a.repr();
    } else if ((conv == 'd' || conv == 'i') && a.is_number()) {
      text = std::to_string(a.is_float() ? static_cast<int64_t>(a.as_float()) : a.as_int());
    } else if (conv == 'f' && a.is_number()) {
      size_t dot = spec.find('.');
      int prec = dot == std::string::npos ? 6 : std::min(100, std::atoi(spec.c_str() + dot + 1));
      std::snprintf(buf, sizeof buf, "%.*f", prec, a.as_float());
      text = buf;
    } else {
      throw EvalError(std::string("unsupported format character '") + conv + "' for " +
                      kind_name(a));
    }
    std::string width_s = spec.substr(0, spec.find('.'));
    bool left = !width_s.empty() && width_s[0] == '-';
    bool zero = !left && !width_s.empty() && width_s[0] == '0' && conv != 's' && conv != 'r';
    size_t width =
        std::min<size_t>(4096, std::strtoul(width_s.c_str() + (left ? 1 : 0), nullptr, 10));
    size_t len = utf8_length(text);
    if (len < width && zero) {
      size_t sign = !text.empty() && text[0] == '-' ? 1 : 0;  // zeros go after the sign
      text.insert(sign, std::string(width - len, '0'));
    } else if (len < width) {
      text = left ? text + std::string(width - len, ' ') : std::string(width - len, ' ') + text;
    }
    out += text;
  }
  if (next < args.size()) throw EvalError("not all arguments converted during string formatting");
  return Value(std::move(out));
}

}  // namespace

Value unary_op(const std::string& op, const Value& v) {
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_number())
    throw EvalError("bad operand type for unary " + op + ": '" + kind_name(v) + "'");
  if (op == "+") return v.is_bool() ? Value(v.as_int()) : v;
  if (v.is_float()) return Value(-v.as_float());
  return Value(sub(0, v.as_int()));
}

Value binary_op(const std::string& op, const Value& a, const Value& b, size_t max_len) {
  if (op == "~") {
    std::string s = a.to_str();
    std::string t = b.to_str();
    if (s.size() + t.size() > max_len)
      throw EvalError("string longer than " + std::to_string(max_len));
    return Value(s + t);
  }
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float() || op == "/") {
      if (op == "/" && !a.is_float() && !b.is_float()) return arith_int(op, a.as_int(), b.as_int());
      return arith_float(op, a.as_float(), b.as_float());
    }
    return arith_int(op, a.as_int(), b.as_int());
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      if (a.str().size() + b.str().size() > max_len)
        throw EvalError("string longer than " + std::to_string(max_len));
      if (!a.is_markup() && !b.is_markup()) return Value(a.str() + b.str());
      return Value::markup((a.is_markup() ? a.str() : html_escape(a.str())) +
                           (b.is_markup() ? b.str() : html_escape(b.str())));
    }
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      if (a.items().size() + b.items().size() > max_len) throw EvalError("list too long");
      List out = a.items();
      out.insert(out.end(), b.items().begin(), b.items().end());
      return Value::list(std::move(out), a.is_tuple());
    }
  }
  if (op == "*") {
    if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool()))
      return repeat(a, b.as_int(), max_len);
    if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool()))
      return repeat(b, a.as_int(), max_len);
  }
  if (op == "%" && a.is_string()) return percent_format(a.str(), b);
  unsupported(op, a, b);
}

bool compare_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return values_equal(a, b);
  if (op == "!=") return !values_equal(a, b);
  if (op == "in") return contains(b, a);
  if (op == "notin") return !contains(b, a);
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  try {
    if (op == "<") return value_less(a, b);
    if (op == ">") return value_less(b, a);
    if (op == "<=") return !value_less(b, a);
    return !value_less(a, b);  // ">="
  } catch (const std::invalid_argument& e) {
    std::string msg = e.what();
    size_t at = msg.find("'<'");
    if (at != std::string::npos) msg.replace(at, 3, "'" + op + "'");
    throw EvalError(msg);
  }
}

}  // namespace unillm::jinja
