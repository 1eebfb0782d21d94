// The value type of the Jinja renderer: the Python objects a chat template sees (None, bool, int,
// float, str, list/tuple, dict, callables) plus jinja2's Undefined. Lists and dicts are shared by
// reference, as in Python, so a namespace() assigned in a loop is seen after it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace unillm::jinja {

class Value;
using List = std::vector<Value>;
// Insertion-ordered, as Python dicts (tojson keeps the key order of the tools schema). Keys are
// strings, numbers, booleans or None, compared as Python compares them (1 == 1.0 == True).
using Dict = std::vector<std::pair<Value, Value>>;

// Arguments of a call: positional then keyword, in source order.
struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  const Value* get(size_t i, const char* name) const;  // positional i or keyword name, else null
};
using Function = std::function<Value(const CallArgs&)>;

class Value {
 public:
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Function };

  Value() = default;  // Undefined
  static Value undefined(std::string name = "") {
    Value v;
    v.s_ = std::make_shared<std::string>(std::move(name));
    return v;
  }
  static Value none() { return Value(Kind::None); }
  Value(bool b) : kind_(Kind::Bool), i_(b) {}
  Value(int i) : kind_(Kind::Int), i_(i) {}
  Value(int64_t i) : kind_(Kind::Int), i_(i) {}
  Value(double f) : kind_(Kind::Float), f_(f) {}
  Value(std::string s) : kind_(Kind::String), s_(std::make_shared<std::string>(std::move(s))) {}
  Value(const char* s) : Value(std::string(s)) {}
  // markupsafe.Markup, what |safe and |escape return: `+` with a plain str escapes the str.
  static Value markup(std::string s) {
    Value v(std::move(s));
    v.flag_ = 1;
    return v;
  }
  static Value list(List items = {}, bool tuple = false);
  // What jinja2's map/select/items/reverse return: iterable, but always true, without len() and
  // not JSON-serialisable (templates that tojson it fail in transformers too).
  static Value generator(List items);
  static Value dict(Dict items = {}, bool is_namespace = false);
  static Value function(std::string name, Function fn);
  static Value from_json(const nlohmann::ordered_json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_int() const { return kind_ == Kind::Int; }
  bool is_float() const { return kind_ == Kind::Float; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_list() const { return kind_ == Kind::List; }
  bool is_dict() const { return kind_ == Kind::Dict; }
  bool is_function() const { return kind_ == Kind::Function; }
  bool is_markup() const { return is_string() && flag_ == 1; }
  bool is_tuple() const { return is_list() && flag_ == 1; }
  bool is_generator() const { return is_list() && flag_ == 2; }
  bool is_namespace() const { return is_dict() && flag_ == 1; }

  bool as_bool() const { return i_ != 0; }
  int64_t as_int() const { return i_; }
  double as_float() const { return is_float() ? f_ : static_cast<double>(i_); }
  const std::string& str() const { return *s_; }  // String (or the name of an Undefined)
  List& items() const { return *list_; }          // List
  Dict& entries() const { return *dict_; }        // Dict
  const Function& fn() const { return *fn_; }     // Function
  const std::string& fn_name() const { return *s_; }

  const Value* find(const Value& key) const;  // Dict key, else null
  void set(const Value& key, Value v) const;  // Dict insert or overwrite

  bool truthy() const;
  std::string to_str() const;              // Python str(): what {{ x }} prints
  std::string repr() const;                // Python repr(), used inside printed lists and dicts
  nlohmann::ordered_json to_json() const;  // throws for Undefined and callables

 private:
  explicit Value(Kind k) : kind_(k) {}
  Kind kind_ = Kind::Undefined;
  int flag_ = 0;  // String: 1 Markup; List: 1 tuple, 2 generator; Dict: 1 namespace
  int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<std::string> s_;
  std::shared_ptr<List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<Function> fn_;
};

bool values_equal(const Value& a, const Value& b);  // Python ==
// Python <, for numbers, strings and lists; throws std::invalid_argument otherwise.
bool value_less(const Value& a, const Value& b);
const char* kind_name(const Value& v);  // Python type name for messages: 'str', 'list', ...

// Python float repr: 1.0, 0.1, 1e-05, 1e+20, inf, nan.
std::string format_float(double f);
// Python json.dumps(v, ensure_ascii, indent, separators, sort_keys) with indent < 0 = None.
struct DumpOptions {
  int indent = -1;
  std::string indent_str;         // indent given as a string
  std::string item_sep, key_sep;  // empty = Python's defaults for the indent
  bool ensure_ascii = false;
  bool sort_keys = false;
};
std::string dump_json(const Value& v, const DumpOptions& o);

// UTF-8 code points of s (Python str indexing is by code point).
std::vector<std::string> utf8_chars(const std::string& s);
size_t utf8_length(const std::string& s);

}  // namespace unillm::jinja
