// Attribute and item access as jinja2's sandbox does it, the Python str/dict/list methods chat
// templates call, slicing, iteration and the globals transformers registers. List mutators
// (append, pop, ...) are refused exactly as transformers' ImmutableSandboxedEnvironment does.
#include <ctime>

#include "io/jinja/builtins.h"
#include "io/jinja/str_util.h"

namespace unillm::jinja {
namespace {

Value method(const std::string& name, Function fn) { return Value::function(name, std::move(fn)); }

// Returned by value: callers pass temporaries as the fallback.
Value arg(const CallArgs& a, size_t i, const char* name, const Value& fallback) {
  const Value* v = a.get(i, name);
  return v ? *v : fallback;
}

const std::string& str_arg(const CallArgs& a, size_t i, const char* name, const char* method) {
  const Value* v = a.get(i, name);
  if (!v || !v->is_string())
    throw EvalError(std::string(method) + "() argument '" + name + "' must be str");
  return v->str();
}

bool affix_match(const std::string& s, const Value& affix, bool prefix) {
  auto one = [&](const Value& p) {
    if (!p.is_string())
      throw EvalError("startswith/endswith argument must be str or a tuple of str");
    const std::string& t = p.str();
    if (t.size() > s.size()) return false;
    return prefix ? s.compare(0, t.size(), t) == 0
                  : s.compare(s.size() - t.size(), t.size(), t) == 0;
  };
  if (affix.is_list()) {
    for (const Value& p : affix.items())
      if (one(p)) return true;
    return false;
  }
  return one(affix);
}

Value chars(const CallArgs& a) {
  static const Value kNone = Value::none();
  return arg(a, 0, "chars", kNone);
}

Value string_method(const std::string& s, const std::string& name) {
  static const Value kNone = Value::none();
  if (name == "strip" || name == "lstrip" || name == "rstrip")
    return method(name, [s, name](const CallArgs& a) {
      Value c = chars(a);
      return Value(
          py_strip(s, c.is_none() ? nullptr : &c.str(), name != "rstrip", name != "lstrip"));
    });
  if (name == "split" || name == "rsplit")
    return method(name, [s](const CallArgs& a) {
      Value sep = arg(a, 0, "sep", kNone);
      Value maxv = arg(a, 1, "maxsplit", Value(-1));
      List out;
      for (auto& p : py_split(s, sep.is_none() ? nullptr : &sep.str(), maxv.as_int()))
        out.emplace_back(p);
      return Value::list(std::move(out));
    });
  if (name == "startswith" || name == "endswith")
    return method(name, [s, name](const CallArgs& a) {
      const Value* p = a.get(0, "prefix");
      if (!p) throw EvalError(name + "() takes at least 1 argument");
      return Value(affix_match(s, *p, name == "startswith"));
    });
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize" ||
      name == "splitlines" || name == "isdigit" || name == "isspace" || name == "isalpha")
    return method(name, [s, name](const CallArgs&) { return str_transform(s, name); });
  if (name == "replace")
    return method(name, [s](const CallArgs& a) {
      return Value(py_replace(s, str_arg(a, 0, "old", "replace"), str_arg(a, 1, "new", "replace"),
                              arg(a, 2, "count", Value(-1)).as_int()));
    });
  if (name == "find" || name == "rfind" || name == "count" || name == "index")
    return method(name, [s, name](const CallArgs& a) {
      const std::string& sub = str_arg(a, 0, "sub", name.c_str());
      return Value(py_find(s, sub, name));
    });
  if (name == "join")
    return method(name, [s](const CallArgs& a) {
      const Value* items = a.get(0, "iterable");
      if (!items) throw EvalError("join() takes exactly one argument");
      std::string out;
      bool first = true;
      for (const Value& v : iterate(*items)) {
        if (!v.is_string()) throw EvalError("sequence item: expected str instance");
        out += (first ? "" : s) + v.str();
        first = false;
      }
      return Value(std::move(out));
    });
  if (name == "format") throw EvalError("str.format() is not supported");
  return Value::undefined("'str object' has no attribute '" + name + "'");
}

Value dict_method(const Value& d, const std::string& name) {
  if (name == "items")
    return method(name, [d](const CallArgs&) {
      List out;
      for (const auto& [k, v] : d.entries()) out.push_back(Value::list({k, v}, true));
      return Value::list(std::move(out));
    });
  if (name == "keys" || name == "values")
    return method(name, [d, name](const CallArgs&) {
      List out;
      for (const auto& [k, v] : d.entries()) out.push_back(name == "keys" ? k : v);
      return Value::list(std::move(out));
    });
  // "get"
  return method(name, [d](const CallArgs& a) {
    const Value* k = a.get(0, "key");
    if (!k) throw EvalError("get expected at least 1 argument, got 0");
    const Value* v = d.find(*k);
    return v ? *v : arg(a, 1, "default", Value::none());
  });
}

Value list_method(const Value& l, const std::string& name) {
  if (name == "index" || name == "count")
    return method(name, [l, name](const CallArgs& a) {
      const Value* x = a.get(0, "value");
      if (!x) throw EvalError(name + "() takes exactly one argument");
      int64_t n = 0;
      for (size_t i = 0; i < l.items().size(); ++i)
        if (values_equal(l.items()[i], *x)) {
          if (name == "index") return Value(static_cast<int64_t>(i));
          ++n;
        }
      if (name == "index") throw EvalError(x->repr() + " is not in list");
      return Value(n);
    });
  static const char* kMutators[] = {"append", "pop",   "insert", "extend",
                                    "remove", "clear", "sort",   "reverse"};
  for (const char* m : kMutators)
    if (name == m)
      return Value::undefined("access to attribute '" + name + "' of '" + kind_name(l) +
                              "' object is unsafe (transformers renders in an immutable sandbox)");
  return Value::undefined(std::string("'") + kind_name(l) + " object' has no attribute '" + name +
                          "'");
}

Value range_fn(const CallArgs& a) {
  std::vector<int64_t> p;
  for (const Value& v : a.pos) {
    if (!v.is_int() && !v.is_bool())
      throw EvalError(std::string("'") + kind_name(v) +
                      "' object cannot be interpreted as an integer");
    p.push_back(v.as_int());
  }
  if (p.empty() || p.size() > 3) throw EvalError("range expected 1 to 3 arguments");
  int64_t start = p.size() > 1 ? p[0] : 0, stop = p.size() > 1 ? p[1] : p[0],
          step = p.size() > 2 ? p[2] : 1;
  if (step == 0) throw EvalError("range() arg 3 must not be zero");
  List out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (static_cast<int64_t>(out.size()) >= kMaxRange)
      throw EvalError("range too big: the sandbox blocks ranges larger than 100000");
    out.emplace_back(i);
    if ((step > 0 && i > INT64_MAX - step) || (step < 0 && i < INT64_MIN - step)) break;
  }
  return Value::list(std::move(out));
}

Value strftime_now(const CallArgs& a) {
  const Value* f = a.get(0, "format");
  if (!f || !f->is_string()) throw EvalError("strftime_now() needs a format string");
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[512];
  size_t n = f->str().empty() ? 0 : std::strftime(buf, sizeof buf, f->str().c_str(), &tm);
  if (n == 0 && !f->str().empty()) throw EvalError("strftime_now: format too long");
  return Value(std::string(buf, n));
}

}  // namespace

std::string undefined_message(const Value& v) {
  return v.str().empty() ? std::string("value is undefined") : v.str();
}

void fail_undefined(const Value& v) { throw EvalError(undefined_message(v)); }

Value get_attribute(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (!name.empty() && name[0] == '_')
    return Value::undefined("access to attribute '" + name + "' is unsafe");
  if (obj.is_dict()) {
    if (!obj.is_namespace() &&
        (name == "items" || name == "keys" || name == "values" || name == "get"))
      return dict_method(obj, name);
    if (const Value* v = obj.find(name)) return *v;
    return Value::undefined(std::string("'") + (obj.is_namespace() ? "Namespace" : "dict object") +
                            "' has no attribute '" + name + "'");
  }
  if (obj.is_string()) return string_method(obj.str(), name);
  if (obj.is_list()) return list_method(obj, name);
  return Value::undefined(std::string("'") + kind_name(obj) + " object' has no attribute '" + name +
                          "'");
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_dict()) {
    const Value* v = key.is_string() || key.is_number() || key.is_none() ? obj.find(key) : nullptr;
    if (v) return *v;
    return Value::undefined("'dict object' has no attribute '" + key.to_str() + "'");
  }
  if (obj.is_generator()) throw EvalError("'generator' object is not subscriptable");
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    // Index in place: templates index messages inside loops, a copy per access would be O(n^2).
    const bool ascii = obj.is_string() && utf8_length(obj.str()) == obj.str().size();
    int64_t n = static_cast<int64_t>(obj.is_list() ? obj.items().size() : utf8_length(obj.str()));
    int64_t i = key.as_int();
    if (i < 0) i += n;
    if (i >= 0 && i < n) {
      if (obj.is_list()) return obj.items()[i];
      if (ascii) return Value(obj.str().substr(i, 1));
      return Value(utf8_chars(obj.str())[i]);
    }
    return Value::undefined(std::string("'") + kind_name(obj) + " object' has no element " +
                            key.to_str());
  }
  if (key.is_string()) return get_attribute(obj, key.str());
  return Value::undefined(std::string("'") + kind_name(obj) + " object' has no element " +
                          key.repr());
}

Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (!obj.is_list() && !obj.is_string())
    throw EvalError(std::string("'") + kind_name(obj) + "' object is not subscriptable");
  for (const Value* p : {&start, &stop, &step})
    if (!p->is_none() && !p->is_int() && !p->is_bool())
      throw EvalError("slice indices must be integers or None");
  std::vector<Value> items = obj.is_list() ? obj.items() : iterate(obj);
  int64_t n = static_cast<int64_t>(items.size());
  int64_t st = step.is_none() ? 1 : step.as_int();
  if (st == 0) throw EvalError("slice step cannot be zero");
  auto clamp = [&](const Value& v, int64_t dflt) {
    if (v.is_none()) return dflt;
    int64_t x = v.as_int();
    if (x < 0)
      x = x < -n ? (st > 0 ? 0 : -1) : x + n;
    else if (x >= n)
      x = st > 0 ? n : n - 1;
    return x;
  };
  int64_t lo = clamp(start, st > 0 ? 0 : n - 1), hi = clamp(stop, st > 0 ? n : -1);
  List out;
  for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) out.push_back(items[i]);
  if (obj.is_list()) return Value::list(std::move(out), obj.is_tuple());
  std::string s;
  for (const Value& c : out) s += c.str();
  return Value(std::move(s));
}

std::vector<Value> iterate(const Value& v) {
  if (v.is_undefined()) return {};
  if (v.is_list()) return v.items();
  if (v.is_dict() && !v.is_namespace()) {
    std::vector<Value> keys;
    for (const auto& kv : v.entries()) keys.emplace_back(kv.first);
    return keys;
  }
  if (v.is_string()) {
    std::vector<Value> out;
    for (auto& c : utf8_chars(v.str())) out.emplace_back(std::move(c));
    return out;
  }
  throw EvalError(std::string("'") + kind_name(v) + "' object is not iterable");
}

Value global_value(const std::string& name) {
  if (name == "range") return Value::function(name, range_fn);
  if (name == "namespace" || name == "dict")
    return Value::function(name, [name](const CallArgs& a) {
      Value d = Value::dict({}, name == "namespace");
      for (const Value& p : a.pos) {
        if (!p.is_dict()) throw EvalError(name + "() positional argument must be a dict");
        for (const auto& [k, v] : p.entries()) d.set(k, v);
      }
      for (const auto& [k, v] : a.kw) d.set(Value(k), v);
      return d;
    });
  if (name == "raise_exception")
    return Value::function(name, [](const CallArgs& a) -> Value {
      throw EvalError("raise_exception: " + (a.pos.empty() ? std::string() : a.pos[0].to_str()));
    });
  if (name == "strftime_now") return Value::function(name, strftime_now);
  return Value();
}

}  // namespace unillm::jinja
