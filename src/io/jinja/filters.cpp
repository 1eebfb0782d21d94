// jinja2's builtin filters and tests that chat templates use, with transformers' tojson
// (json.dumps with ensure_ascii=False and the caller's indent). An unknown filter or test is an
// error naming it, as in jinja2.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "io/jinja/builtins.h"
#include "io/jinja/str_util.h"

namespace unillm::jinja {
namespace {

// Argument i of a filter (0 = the first after the filtered value) or its keyword.
// Returned by value: callers pass temporaries as the fallback.
Value opt(const CallArgs& a, size_t i, const char* name, const Value& fallback) {
  const Value* v = a.get(i, name);
  return v ? *v : fallback;
}

int64_t length_of(const Value& v) {
  if (v.is_undefined()) return 0;
  if (v.is_generator()) throw EvalError("object of type 'generator' has no len()");
  if (v.is_string()) return static_cast<int64_t>(utf8_length(v.str()));
  if (v.is_list()) return static_cast<int64_t>(v.items().size());
  if (v.is_dict()) return static_cast<int64_t>(v.entries().size());
  throw EvalError(std::string("object of type '") + kind_name(v) + "' has no len()");
}

// jinja2's make_attrgetter: "a.b.0" walks attributes and integer items.
Value attr_path(const Value& item, const std::string& path) {
  Value v = item;
  size_t pos = 0;
  for (;;) {
    size_t dot = path.find('.', pos);
    std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    bool digits =
        !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit) && part.size() < 18;
    v = digits ? get_item(v, Value(static_cast<int64_t>(std::stoll(part))))
               : get_item(v, Value(part));
    if (dot == std::string::npos) return v;
    pos = dot + 1;
  }
}

// Sort key: strings lower-cased unless case_sensitive (jinja2's ignore_case).
Value sort_key(const Value& item, const Value& attribute, bool case_sensitive) {
  Value k = attribute.is_string() ? attr_path(item, attribute.str()) : item;
  if (!case_sensitive && k.is_string()) return str_transform(k.str(), "lower");
  return k;
}

bool less_or_throw(const Value& a, const Value& b) {
  try {
    return value_less(a, b);
  } catch (const std::invalid_argument& e) {
    throw EvalError(e.what());
  }
}

Value sorted(std::vector<Value> items, const Value& attribute, bool case_sensitive, bool reverse) {
  std::vector<std::pair<Value, Value>> keyed;
  for (auto& v : items) keyed.emplace_back(sort_key(v, attribute, case_sensitive), v);
  std::stable_sort(keyed.begin(), keyed.end(), [reverse](const auto& x, const auto& y) {
    return reverse ? less_or_throw(y.first, x.first) : less_or_throw(x.first, y.first);
  });
  List out;
  for (auto& kv : keyed) out.push_back(kv.second);
  return Value::list(std::move(out));
}

Value tojson(const Value& v, const CallArgs& a) {
  DumpOptions o;
  o.ensure_ascii = opt(a, 0, "ensure_ascii", Value(false)).truthy();
  Value indent = opt(a, 1, "indent", Value::none());
  if (indent.is_int())
    o.indent = static_cast<int>(std::clamp<int64_t>(indent.as_int(), 0, 64));
  else if (indent.is_string())
    o.indent_str = indent.str(), o.indent = 0;
  else if (!indent.is_none())
    throw EvalError("tojson: indent must be an int or a string");
  Value seps = opt(a, 2, "separators", Value::none());
  if (seps.is_list() && seps.items().size() == 2 && seps.items()[0].is_string() &&
      seps.items()[1].is_string()) {
    o.item_sep = seps.items()[0].str();
    o.key_sep = seps.items()[1].str();
  } else if (!seps.is_none()) {
    throw EvalError("tojson: separators must be a pair of strings");
  }
  o.sort_keys = opt(a, 3, "sort_keys", Value(false)).truthy();
  try {
    return Value(dump_json(v, o));
  } catch (const std::invalid_argument& e) {
    throw EvalError(e.what());
  }
}

Value to_int(const Value& v, const CallArgs& a) {
  Value dflt = opt(a, 0, "default", Value(0));
  if (v.is_int() || v.is_bool()) return Value(v.as_int());
  if (v.is_float())
    return std::isfinite(v.as_float()) ? Value(static_cast<int64_t>(v.as_float())) : dflt;
  if (!v.is_string()) return dflt;
  std::string s = py_strip(v.str(), nullptr, true, true);
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  char* end = nullptr;
  errno = 0;
  long long i = std::strtoll(s.c_str(), &end, 10);
  if (!s.empty() && *end == 0 && errno == 0) return Value(static_cast<int64_t>(i));
  double f = std::strtod(s.c_str(), &end);
  if (!s.empty() && *end == 0 && std::isfinite(f) && std::fabs(f) < 9e18)
    return Value(static_cast<int64_t>(f));
  return dflt;
}

Value to_float(const Value& v, const CallArgs& a) {
  Value dflt = opt(a, 0, "default", Value(0.0));
  if (v.is_number()) return Value(v.as_float());
  if (!v.is_string()) return dflt;
  std::string s = py_strip(v.str(), nullptr, true, true);
  char* end = nullptr;
  double f = std::strtod(s.c_str(), &end);
  return !s.empty() && *end == 0 ? Value(f) : dflt;
}

Value round_filter(const Value& v, const CallArgs& a) {
  if (!v.is_number())
    throw EvalError(std::string("type ") + kind_name(v) + " doesn't define __round__");
  int64_t p = std::clamp<int64_t>(opt(a, 0, "precision", Value(0)).as_int(), -300, 300);
  Value method = opt(a, 1, "method", Value("common"));
  double x = v.as_float();
  if (method.is_string() && method.str() != "common") {
    double scale = std::pow(10.0, static_cast<double>(p));
    if (method.str() == "floor") return Value(std::floor(x * scale) / scale);
    if (method.str() == "ceil") return Value(std::ceil(x * scale) / scale);
    throw EvalError("round: method must be 'common', 'ceil' or 'floor'");
  }
  if (!v.is_float()) return Value(v.as_int());  // Python: round(int, n) stays an int
  if (!std::isfinite(x) || p < 0 || p > 30) return Value(x);
  char buf[400];
  std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(p), x);  // correctly rounded, as CPython
  return Value(std::strtod(buf, nullptr));
}

Value map_filter(const Value& v, const CallArgs& a) {
  List out;
  if (!v.truthy()) return Value::generator({});  // jinja2: `if value:` before iterating
  const Value* attribute = nullptr;
  for (const auto& [k, val] : a.kw)
    if (k == "attribute") attribute = &val;
  if (attribute) {
    Value dflt;
    for (const auto& kv : a.kw)
      if (kv.first == "default") dflt = kv.second;
    for (const Value& item : iterate(v)) {
      Value x = attr_path(item, attribute->to_str());
      out.push_back(x.is_undefined() && !dflt.is_undefined() ? dflt : x);
    }
    return Value::generator(std::move(out));
  }
  if (a.pos.empty() || !a.pos[0].is_string())
    throw EvalError("map: expected a filter name or attribute=");
  CallArgs rest{std::vector<Value>(a.pos.begin() + 1, a.pos.end()), a.kw};
  for (const Value& item : iterate(v)) out.push_back(call_filter(a.pos[0].str(), item, rest));
  return Value::generator(std::move(out));
}

// select / reject / selectattr / rejectattr.
Value select_filter(const Value& v, const CallArgs& a, bool by_attr, bool keep) {
  size_t first = by_attr ? 1 : 0;
  if (by_attr && (a.pos.empty() || !a.pos[0].is_string()))
    throw EvalError("selectattr: missing attribute");
  std::string test = a.pos.size() > first ? a.pos[first].to_str() : "";
  CallArgs targs{a.pos.size() > first + 1
                     ? std::vector<Value>(a.pos.begin() + first + 1, a.pos.end())
                     : std::vector<Value>{},
                 a.kw};
  List out;
  if (!v.truthy()) return Value::generator({});  // jinja2: `if value:` before iterating
  for (const Value& item : iterate(v)) {
    Value x = by_attr ? attr_path(item, a.pos[0].str()) : item;
    bool ok = test.empty() ? x.truthy() : call_test(test, x, targs);
    if (ok == keep) out.push_back(item);
  }
  return Value::generator(std::move(out));
}

Value join_filter(const Value& v, const CallArgs& a) {
  std::string sep = opt(a, 0, "d", Value("")).to_str();
  Value attribute = opt(a, 1, "attribute", Value::none());
  std::string out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    out += (first ? "" : sep) +
           (attribute.is_none() ? item : attr_path(item, attribute.to_str())).to_str();
    first = false;
  }
  return Value(std::move(out));
}

Value unique_filter(const Value& v, const CallArgs& a) {
  bool cs = opt(a, 0, "case_sensitive", Value(false)).truthy();
  Value attribute = opt(a, 1, "attribute", Value::none());
  List out, seen;
  for (const Value& item : iterate(v)) {
    Value k = sort_key(item, attribute, cs);
    if (std::none_of(seen.begin(), seen.end(),
                     [&](const Value& s) { return values_equal(s, k); })) {
      seen.push_back(k);
      out.push_back(item);
    }
  }
  return Value::generator(std::move(out));
}

Value dictsort_filter(const Value& v, const CallArgs& a) {
  if (!v.is_dict()) throw EvalError("dictsort: expected a dict");
  bool cs = opt(a, 0, "case_sensitive", Value(false)).truthy();
  bool by_value = opt(a, 1, "by", Value("key")).to_str() == "value";
  bool reverse = opt(a, 2, "reverse", Value(false)).truthy();
  std::vector<Value> pairs;
  for (const auto& [k, val] : v.entries()) pairs.push_back(Value::list({k, val}, true));
  return sorted(std::move(pairs), Value(by_value ? "1" : "0"), cs, reverse);
}

Value minmax(const Value& v, const CallArgs& a, bool want_max) {
  bool cs = opt(a, 0, "case_sensitive", Value(false)).truthy();
  Value attribute = opt(a, 1, "attribute", Value::none());
  std::vector<Value> items = iterate(v);
  if (items.empty())
    return Value::undefined("no " + std::string(want_max ? "max" : "min") +
                            " item, sequence was empty");
  Value best = items[0], best_key = sort_key(items[0], attribute, cs);
  for (const Value& item : items) {
    Value k = sort_key(item, attribute, cs);
    if (want_max ? less_or_throw(best_key, k) : less_or_throw(k, best_key))
      best = item, best_key = k;
  }
  return best;
}

Value sum_filter(const Value& v, const CallArgs& a) {
  Value attribute = opt(a, 0, "attribute", Value::none());
  Value total = opt(a, 1, "start", Value(0));
  for (const Value& item : iterate(v)) {
    Value x = attribute.is_none() ? item : attr_path(item, attribute.to_str());
    if (!x.is_number() || !total.is_number()) throw EvalError("sum: items must be numbers");
    total = total.is_float() || x.is_float() ? Value(total.as_float() + x.as_float())
                                             : Value(total.as_int() + x.as_int());
  }
  return total;
}

Value text_filter(const std::string& name, const Value& v, const CallArgs& a) {
  std::string s = v.to_str();
  if (name == "trim") {
    Value chars = opt(a, 0, "chars", Value::none());
    return Value(py_strip(s, chars.is_none() ? nullptr : &chars.str(), true, true));
  }
  if (name == "upper" || name == "lower" || name == "capitalize") return str_transform(s, name);
  if (name == "title") return Value(jinja_title(s));
  if (name == "replace") {
    const Value* old_v = a.get(0, "old");
    const Value* new_v = a.get(1, "new");
    if (!old_v || !new_v) throw EvalError("replace needs old and new strings");
    Value count = opt(a, 2, "count", Value::none());
    return Value(
        py_replace(s, old_v->to_str(), new_v->to_str(), count.is_none() ? -1 : count.as_int()));
  }
  if (name == "indent") {
    Value width = opt(a, 0, "width", Value(4));
    std::string unit = width.is_string()
                           ? width.str()
                           : std::string(std::clamp<int64_t>(width.as_int(), 0, 1 << 16), ' ');
    return Value(jinja_indent(s, unit, opt(a, 1, "first", Value(false)).truthy(),
                              opt(a, 2, "blank", Value(false)).truthy()));
  }
  if (name == "center") return Value(py_center(s, opt(a, 0, "width", Value(80)).as_int()));
  if (name == "wordcount") return Value(word_count(s));
  if (name == "e" || name == "escape") return v.is_markup() ? v : Value::markup(html_escape(s));
  if (name == "safe") return Value::markup(s);
  return Value(s);  // string
}

const char* const kFilters[] = {
    "trim",      "upper",  "lower",   "capitalize", "title", "replace", "indent",     "center",
    "wordcount", "e",      "escape",  "string",     "safe",  "tojson",  "length",     "count",
    "default",   "d",      "first",   "last",       "list",  "items",   "selectattr", "rejectattr",
    "select",    "reject", "map",     "join",       "int",   "float",   "abs",        "round",
    "unique",    "sort",   "reverse", "dictsort",   "min",   "max",     "sum",        "attr"};
const char* const kTests[] = {
    "defined",  "undefined", "none",   "boolean", "true",        "false",
    "integer",  "float",     "number", "string",  "mapping",     "iterable",
    "sequence", "callable",  "odd",    "even",    "divisibleby", "equalto",
    "eq",       "==",        "sameas", "ne",      "!=",          "lt",
    "<",        "lessthan",  "gt",     ">",       "greaterthan", "le",
    "<=",       "ge",        ">=",     "in",      "lower",       "upper"};

}  // namespace

bool has_filter(const std::string& name) {
  return std::find(std::begin(kFilters), std::end(kFilters), name) != std::end(kFilters);
}

bool has_test(const std::string& name) {
  return std::find(std::begin(kTests), std::end(kTests), name) != std::end(kTests);
}

Value call_filter(const std::string& name, const Value& v, const CallArgs& a) {
  static const char* kText[] = {"trim",    "upper",  "lower",  "capitalize", "title",
                                "replace", "indent", "center", "wordcount",  "e",
                                "escape",  "string", "safe"};
  for (const char* t : kText)
    if (name == t) return text_filter(name, v, a);
  if (name == "tojson") return tojson(v, a);
  if (name == "length" || name == "count") return Value(length_of(v));
  if (name == "default" || name == "d") {
    bool boolean = opt(a, 1, "boolean", Value(false)).truthy();
    if (v.is_undefined() || (boolean && !v.truthy())) return opt(a, 0, "default_value", Value(""));
    return v;
  }
  if (name == "first" || name == "last") {
    std::vector<Value> items = iterate(v);
    if (items.empty()) return Value::undefined("no " + name + " item, sequence was empty");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") return Value::list(iterate(v));
  if (name == "items") {
    if (v.is_undefined()) return Value::generator({});
    if (!v.is_dict() || v.is_namespace()) throw EvalError("can only get item pairs from a mapping");
    List out;
    for (const auto& [k, val] : v.entries()) out.push_back(Value::list({k, val}, true));
    return Value::generator(std::move(out));
  }
  if (name == "selectattr" || name == "rejectattr")
    return select_filter(v, a, true, name == "selectattr");
  if (name == "select" || name == "reject") return select_filter(v, a, false, name == "select");
  if (name == "map") return map_filter(v, a);
  if (name == "join") return join_filter(v, a);
  if (name == "int") return to_int(v, a);
  if (name == "float") return to_float(v, a);
  if (name == "abs") {
    if (!v.is_number())
      throw EvalError(std::string("bad operand type for abs(): '") + kind_name(v) + "'");
    return v.is_float() ? Value(std::fabs(v.as_float()))
                        : Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
  }
  if (name == "round") return round_filter(v, a);
  if (name == "unique") return unique_filter(v, a);
  if (name == "sort")
    return sorted(iterate(v), opt(a, 2, "attribute", Value::none()),
                  opt(a, 1, "case_sensitive", Value(false)).truthy(),
                  opt(a, 0, "reverse", Value(false)).truthy());
  if (name == "reverse") {
    if (v.is_string()) {
      std::vector<std::string> cs = utf8_chars(v.str());
      std::string out;
      for (auto it = cs.rbegin(); it != cs.rend(); ++it) out += *it;
      return Value(std::move(out));
    }
    std::vector<Value> items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::generator(std::move(items));  // a list_reverseiterator in Python
  }
  if (name == "dictsort") return dictsort_filter(v, a);
  if (name == "min" || name == "max") return minmax(v, a, name == "max");
  if (name == "sum") return sum_filter(v, a);
  if (name == "attr") return get_attribute(v, opt(a, 0, "name", Value("")).to_str());
  throw EvalError("no filter named '" + name + "'");
}

bool call_test(const std::string& name, const Value& v, const CallArgs& a) {
  using K = Value::Kind;
  const Value* x = a.get(0, "other");
  auto need = [&]() -> const Value& {
    if (!x) throw EvalError("test '" + name + "' needs an argument");
    return *x;
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict() && !v.is_namespace();
  if (name == "iterable" || name == "sequence")
    return v.is_list() || v.is_string() || v.is_undefined() || (v.is_dict() && !v.is_namespace());
  if (name == "callable") return v.is_function();
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (v.is_undefined()) fail_undefined(v);
    if (!v.is_number())
      throw EvalError(std::string("unsupported operand type(s) for %: '") + kind_name(v) + "'");
    Value d = name == "divisibleby" ? need() : Value(2);
    if (!d.is_number() || d.as_float() == 0)
      throw EvalError("divisibleby: divisor must be a non-zero number");
    double r = std::fmod(v.as_float(), d.as_float());
    return name == "odd" ? r != 0 : r == 0;
  }
  if (name == "equalto" || name == "eq" || name == "==" || name == "sameas")
    return values_equal(v, need());
  if (name == "ne" || name == "!=") return !values_equal(v, need());
  if (name == "lt" || name == "<" || name == "lessthan") return less_or_throw(v, need());
  if (name == "gt" || name == ">" || name == "greaterthan") return less_or_throw(need(), v);
  if (name == "le" || name == "<=") return !less_or_throw(need(), v);
  if (name == "ge" || name == ">=") return !less_or_throw(v, need());
  if (name == "in") {
    const Value& seq = need();
    if (seq.kind() == K::String)
      return v.is_string() && seq.str().find(v.str()) != std::string::npos;
    if (seq.kind() == K::Dict) return seq.find(v) != nullptr;
    for (const Value& item : iterate(seq))
      if (values_equal(item, v)) return true;
    return false;
  }
  if (name == "lower" || name == "upper") {
    std::string s = v.to_str();
    bool cased = false;
    for (char c : s) {
      if (std::isalpha(static_cast<unsigned char>(c))) cased = true;
      if (name == "lower" ? std::isupper(static_cast<unsigned char>(c))
                          : std::islower(static_cast<unsigned char>(c)))
        return false;
    }
    return cased;
  }
  throw EvalError("no test named '" + name + "'");
}

}  // namespace unillm::jinja
