// Python's operators on template values: unary -/+, arithmetic, ~, comparisons and `in`.
// Errors are EvalErrors with Python's wording ("unsupported operand type(s) for +: ...").
#pragma once

#include <string>

#include "io/jinja/value.h"

namespace unillm::jinja {

Value unary_op(const std::string& op, const Value& v);
// max_len bounds strings and lists built by + and * (a template cannot allocate without limit).
Value binary_op(const std::string& op, const Value& a, const Value& b, size_t max_len);
bool compare_op(const std::string& op, const Value& a, const Value& b);

}  // namespace unillm::jinja
