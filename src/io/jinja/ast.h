// Syntax tree of a parsed template: expressions and statements, each with its source line for
// error messages. One generic node per family keeps the parser and evaluator short.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "io/jinja/value.h"

namespace unillm::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Const,    // value
    Name,     // name
    List,     // args
    Tuple,    // args
    Dict,     // args = key, value, key, value...
    Attr,     // args[0].name
    Item,     // args[0][args[1]]
    Slice,    // args[0][args[1]:args[2]:args[3]] (null = omitted)
    Call,     // args[0](args[1..], kwargs)
    Filter,   // args[0] | name(args[1..], kwargs); args[0] null inside {% filter %}
    Test,     // args[0] is [not] name(args[1..])
    Unary,    // name in {not, -, +}
    Binary,   // args[0] name args[1]; name: or and + - * / // % ** ~
    Compare,  // args[0] ops[0] args[1] ops[1] args[2]...: Python's chained comparison
    Cond,     // args[1] if args[0] else args[2] (args[2] null = undefined)
  };
  Kind kind;
  int line;
  std::string name;
  Value value;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  // Compare: == != < > <= >= in notin
  bool negated = false;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind {
    Text,         // text
    Output,       // {{ expr }}
    If,           // conds[i] -> bodies[i]; else_body
    For,          // targets in expr [if cond] body; else_body
    Set,          // targets (or ns.attr: ns_attr) = expr
    SetBlock,     // targets[0] = rendered body, then filter (Filter expr with null base)
    Macro,        // name(params = defaults) body
    CallBlock,    // call (params) expr body: expr called with caller = body
    FilterBlock,  // expr (Filter with null base) applied to rendered body
    Generation,   // body rendered as is (transformers' AssistantTracker tag)
    Break,
    Continue,
  };
  Kind kind;
  int line;
  std::string text;                  // Text; Macro name; Set ns attribute
  ExprPtr expr, cond;                // value / iterable / callee / filter; For filter
  std::vector<std::string> targets;  // For / Set names
  std::vector<ExprPtr> conds;        // If
  std::vector<Body> bodies;          // If branches; bodies[0] for the others
  Body else_body;
  std::vector<std::pair<std::string, ExprPtr>> params;  // Macro / CallBlock (default may be null)
};

}  // namespace unillm::jinja
