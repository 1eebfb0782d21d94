// What a template can call without defining it: jinja2's filters and tests, the Python methods
// of str/dict/list that templates use, attribute and item access, and the globals transformers
// provides (range, namespace, dict, raise_exception, strftime_now).
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "io/jinja/value.h"

namespace unillm::jinja {

// A Python-level error (TypeError, UndefinedError, raise_exception...): the renderer catches it
// and rethrows a ConfigError naming the template and line.
struct EvalError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

constexpr int64_t kMaxRange = 100000;  // jinja2's sandbox refuses larger range()s

// jinja2 rejects an unknown filter or test when it compiles the template; the parser asks these.
bool has_filter(const std::string& name);
bool has_test(const std::string& name);
Value call_filter(const std::string& name, const Value& v, const CallArgs& args);
bool call_test(const std::string& name, const Value& v, const CallArgs& args);
// jinja2's getattr (methods first, then keys) and getitem (keys and indices first).
Value get_attribute(const Value& obj, const std::string& name);
Value get_item(const Value& obj, const Value& key);
Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
Value global_value(const std::string& name);  // Undefined when there is no such global
// List items, dict keys or string characters; Undefined iterates as empty.
std::vector<Value> iterate(const Value& v);
[[noreturn]] void fail_undefined(const Value& v);
std::string undefined_message(const Value& v);

}  // namespace unillm::jinja
