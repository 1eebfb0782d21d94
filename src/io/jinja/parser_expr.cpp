// Expression parsing with jinja2's precedence: condexpr < or < and < not < compare < + - < ~ <
// * / // % < ** < unary < primary + postfix (.attr [item] (call)) + filters and tests.
#include "io/jinja/parser_impl.h"

namespace unillm::jinja::parse_detail {

ExprPtr Parser::parse_tuple(bool condexpr, bool explicit_parens, const char* extra_end) {
  int line = cur().line;
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  for (;;) {
    if (!items.empty()) expect_op(",");
    if (tuple_end(extra_end)) break;
    items.push_back(parse_expression(condexpr));
    if (is_op(","))
      is_tuple = true;
    else
      break;
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items[0]);
    if (!explicit_parens) fail("expected an expression, got " + describe(cur()));
  }
  auto e = mk(Expr::Kind::Tuple, line);
  e->args = std::move(items);
  return e;
}

ExprPtr Parser::parse_condexpr() {
  DepthGuard guard(this);
  ExprPtr e = parse_or();
  ChainGuard chain(this);
  while (is_name("if")) {
    chain.step();
    auto c = mk(Expr::Kind::Cond, cur().line);
    next();
    c->args.push_back(parse_or());
    c->args.push_back(std::move(e));
    c->args.push_back(skip_name("else") ? parse_condexpr() : nullptr);
    e = std::move(c);
  }
  return e;
}

ExprPtr Parser::binary(const std::string& op, ExprPtr l, ExprPtr r, int line) {
  auto e = mk(Expr::Kind::Binary, line);
  e->name = op;
  e->args.push_back(std::move(l));
  e->args.push_back(std::move(r));
  return e;
}

ExprPtr Parser::parse_or() {
  ExprPtr e = parse_and();
  ChainGuard chain(this);
  while (is_name("or")) {
    chain.step();
    int line = cur().line;
    next();
    e = binary("or", std::move(e), parse_and(), line);
  }
  return e;
}

ExprPtr Parser::parse_and() {
  ExprPtr e = parse_not();
  ChainGuard chain(this);
  while (is_name("and")) {
    chain.step();
    int line = cur().line;
    next();
    e = binary("and", std::move(e), parse_not(), line);
  }
  return e;
}

ExprPtr Parser::parse_not() {
  if (is_name("not")) {
    DepthGuard guard(this);
    auto e = mk(Expr::Kind::Unary, cur().line);
    next();
    e->name = "not";
    e->args.push_back(parse_not());
    return e;
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
  int line = cur().line;
  ExprPtr first = parse_math1();
  auto e = mk(Expr::Kind::Compare, line);
  ChainGuard chain(this);
  for (;;) {
    chain.step();
    static const char* kOps[] = {"==", "!=", "<", ">", "<=", ">="};
    std::string op;
    for (const char* o : kOps)
      if (is_op(o)) op = o;
    if (!op.empty()) {
      next();
    } else if (is_name("in")) {
      next();
      op = "in";
    } else if (is_name("not") && peek().kind == Tok::Name && peek().text == "in") {
      next();
      next();
      op = "notin";
    } else {
      break;
    }
    e->ops.push_back(op);
    e->args.push_back(parse_math1());
  }
  if (e->ops.empty()) return first;
  e->args.insert(e->args.begin(), std::move(first));
  return e;
}

ExprPtr Parser::parse_left_assoc(const std::vector<const char*>& ops, ExprPtr (Parser::*sub)()) {
  ExprPtr e = (this->*sub)();
  ChainGuard chain(this);
  for (;;) {
    chain.step();
    const char* hit = nullptr;
    for (const char* o : ops)
      if (is_op(o)) hit = o;
    if (!hit) return e;
    int line = cur().line;
    next();
    e = binary(hit, std::move(e), (this->*sub)(), line);
  }
}

ExprPtr Parser::parse_unary(bool with_filter) {
  DepthGuard guard(this);
  ExprPtr e;
  if (is_op("-") || is_op("+")) {
    e = mk(Expr::Kind::Unary, cur().line);
    e->name = cur().text;
    next();
    e->args.push_back(parse_unary(false));
  } else {
    e = parse_primary();
  }
  e = parse_postfix(std::move(e));
  if (with_filter) e = parse_filter_expr(std::move(e));
  return e;
}

ExprPtr Parser::parse_primary() {
  const Token& tk = cur();
  int line = tk.line;
  if (tk.kind == Tok::Name) {
    auto e = mk(Expr::Kind::Const, line);
    const std::string& n = tk.text;
    if (n == "true" || n == "True")
      e->value = Value(true);
    else if (n == "false" || n == "False")
      e->value = Value(false);
    else if (n == "none" || n == "None")
      e->value = Value::none();
    else
      e->kind = Expr::Kind::Name, e->name = n;
    next();
    return e;
  }
  if (tk.kind == Tok::String) {
    std::string s;
    while (cur().kind == Tok::String) s += cur().text, next();  // "a" "b" concatenates
    auto e = mk(Expr::Kind::Const, line);
    e->value = Value(std::move(s));
    return e;
  }
  if (tk.kind == Tok::Int || tk.kind == Tok::Float) {
    auto e = mk(Expr::Kind::Const, line);
    try {
      e->value = tk.kind == Tok::Int ? Value(static_cast<int64_t>(std::stoll(tk.text)))
                                     : Value(std::stod(tk.text));
    } catch (const std::exception&) {
      fail("number '" + tk.text + "' out of range");
    }
    next();
    return e;
  }
  if (skip_op("(")) {
    ExprPtr e = parse_tuple(true, true);
    expect_op(")");
    return e;
  }
  if (skip_op("[")) return parse_list_or_dict(Expr::Kind::List, "]", line);
  if (skip_op("{")) return parse_list_or_dict(Expr::Kind::Dict, "}", line);
  fail("unexpected " + describe(tk) + " in expression");
}

ExprPtr Parser::parse_list_or_dict(Expr::Kind kind, const char* close, int line) {
  auto e = mk(kind, line);
  while (!is_op(close)) {
    if (!e->args.empty()) expect_op(",");
    if (is_op(close)) break;
    e->args.push_back(parse_expression(true));
    if (kind == Expr::Kind::Dict) {
      expect_op(":");
      e->args.push_back(parse_expression(true));
    }
  }
  next();
  return e;
}

ExprPtr Parser::parse_postfix(ExprPtr e) {
  ChainGuard chain(this);
  for (;;) {
    chain.step();
    if (is_op(".") || is_op("["))
      e = parse_subscript(std::move(e));
    else if (is_op("("))
      e = parse_call(std::move(e));
    else
      return e;
  }
}

ExprPtr Parser::parse_filter_expr(ExprPtr e) {
  ChainGuard chain(this);
  for (;;) {
    chain.step();
    if (is_op("|"))
      e = parse_filter(std::move(e), false);
    else if (is_name("is"))
      e = parse_test(std::move(e));
    else if (is_op("("))
      e = parse_call(std::move(e));
    else
      return e;
  }
}

ExprPtr Parser::parse_subscript(ExprPtr base) {
  int line = cur().line;
  if (skip_op(".")) {
    if (cur().kind == Tok::Int) {
      auto e = mk(Expr::Kind::Item, line);
      auto idx = mk(Expr::Kind::Const, line);
      try {  // `x.<digits>` past int64 (a fuzzer's find): the literal path's error, not an abort
        idx->value = Value(static_cast<int64_t>(std::stoll(cur().text)));
      } catch (const std::exception&) {
        fail("number '" + cur().text + "' out of range");
      }
      next();
      e->args.push_back(std::move(base));
      e->args.push_back(std::move(idx));
      return e;
    }
    auto e = mk(Expr::Kind::Attr, line);
    e->name = expect_name();
    e->args.push_back(std::move(base));
    return e;
  }
  expect_op("[");
  std::vector<ExprPtr> subs;
  while (!is_op("]")) {
    if (!subs.empty()) expect_op(",");
    subs.push_back(parse_subscribed());
  }
  next();
  if (subs.empty()) fail_at("empty subscript '[]'", line);
  // x[1, ::-1]: Python builds a tuple key holding a slice object, which no list, string or dict
  // accepts, so the result is undefined; a None in its place gives the same.
  for (auto& sub : subs)
    if (subs.size() > 1 && sub->kind == Expr::Kind::Slice) {
      sub = mk(Expr::Kind::Const, sub->line);
      sub->value = Value::none();
    }
  if (subs.size() == 1 && subs[0]->kind == Expr::Kind::Slice) {
    subs[0]->args.insert(subs[0]->args.begin(), std::move(base));
    return std::move(subs[0]);
  }
  auto e = mk(Expr::Kind::Item, line);
  e->args.push_back(std::move(base));
  if (subs.size() == 1) {
    e->args.push_back(std::move(subs[0]));
  } else {
    auto t = mk(Expr::Kind::Tuple, line);
    t->args = std::move(subs);
    e->args.push_back(std::move(t));
  }
  return e;
}

// One subscript: an expression or a slice start:stop:step (parts may be omitted).

ExprPtr Parser::parse_subscribed() {
  int line = cur().line;
  std::vector<ExprPtr> parts;
  if (!is_op(":")) {
    ExprPtr e = parse_expression(true);
    if (!is_op(":")) return e;
    parts.push_back(std::move(e));
  } else {
    parts.push_back(nullptr);
  }
  next();  // ':'
  auto part_end = [&] { return is_op("]") || is_op(",") || is_op(":"); };
  parts.push_back(part_end() ? nullptr : parse_expression(true));
  if (skip_op(":"))
    parts.push_back(is_op("]") || is_op(",") ? nullptr : parse_expression(true));
  else
    parts.push_back(nullptr);
  auto s = mk(Expr::Kind::Slice, line);
  s->args = std::move(parts);
  return s;
}

void Parser::parse_call_args(Expr& e) {
  expect_op("(");
  bool first = true;
  while (!is_op(")")) {
    if (!first) expect_op(",");
    first = false;
    if (is_op(")")) break;
    if (is_op("*") || is_op("**")) fail("*args and **kwargs in calls are not supported");
    if (cur().kind == Tok::Name && peek().kind == Tok::Op && peek().text == "=") {
      std::string key = cur().text;
      next();
      next();
      e.kwargs.emplace_back(key, parse_expression(true));
    } else {
      if (!e.kwargs.empty()) fail("positional argument after keyword argument");
      e.args.push_back(parse_expression(true));
    }
  }
  next();
}

ExprPtr Parser::parse_call(ExprPtr callee) {
  auto e = mk(Expr::Kind::Call, cur().line);
  e->args.push_back(std::move(callee));
  parse_call_args(*e);
  return e;
}

std::string Parser::dotted_name() {
  std::string n = expect_name();
  while (is_op(".") && peek().kind == Tok::Name) {
    next();
    n += "." + cur().text;
    next();
  }
  return n;
}

ExprPtr Parser::parse_filter(ExprPtr base, bool inline_start) {
  ChainGuard chain(this);
  while (is_op("|") || inline_start) {
    chain.step();
    if (!inline_start) next();
    inline_start = false;
    auto f = mk(Expr::Kind::Filter, cur().line);
    f->name = dotted_name();
    f->args.push_back(std::move(base));
    if (is_op("(")) parse_call_args(*f);
    base = std::move(f);
  }
  return base;
}

ExprPtr Parser::parse_test(ExprPtr base) {
  auto t = mk(Expr::Kind::Test, cur().line);
  next();  // 'is'
  t->negated = skip_name("not");
  t->name = dotted_name();
  t->args.push_back(std::move(base));
  const Token& tk = cur();
  bool arg_start = tk.kind == Tok::Name || tk.kind == Tok::String || tk.kind == Tok::Int ||
                   tk.kind == Tok::Float || is_op("[") || is_op("{");
  if (is_op("(")) {
    parse_call_args(*t);
  } else if (arg_start && !is_name("else") && !is_name("or") && !is_name("and")) {
    if (is_name("is")) fail("you cannot chain multiple tests with 'is'");
    t->args.push_back(parse_postfix(parse_primary()));
  }
  return t;
}

}  // namespace unillm::jinja::parse_detail
