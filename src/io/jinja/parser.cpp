// Recursive-descent parser following jinja2's own grammar: this file holds the statements
// (if/for/set/macro/call/filter/generation/break/continue); parser_expr.cpp the expressions.
// Nesting is bounded so a hostile template fails with an error instead of overflowing the stack.
#include "io/jinja/parser.h"

#include "io/jinja/builtins.h"
#include "io/jinja/parser_impl.h"

namespace unillm::jinja {
namespace parse_detail {

// Statements until one of `stops` ({% name ... %}); returns that name, with the cursor just
// after it. `opener`/`open_line` say which tag is waiting, for the end-of-template error.
std::string Parser::parse_body(Body& body, const std::vector<std::string>& stops,
                               const std::string& opener, int open_line) {
  DepthGuard guard(this);
  for (;;) {
    const Token& tk = cur();
    if (tk.kind == Tok::Eof) {
      if (stops.empty()) return "";
      fail("unexpected end of template: '" + opener + "' opened on line " +
           std::to_string(open_line) + " is never closed with '" + stops.back() + "'");
    }
    if (tk.kind == Tok::Text) {
      auto s = mk_stmt(Stmt::Kind::Text, tk.line);
      s->text = tk.text;
      body.push_back(std::move(s));
      next();
    } else if (tk.kind == Tok::VarBegin) {
      auto s = mk_stmt(Stmt::Kind::Output, tk.line);
      next();
      s->expr = parse_tuple(true, false);
      if (cur().kind != Tok::VarEnd) fail("expected '}}', got " + describe(cur()));
      next();
      body.push_back(std::move(s));
    } else if (tk.kind == Tok::BlockBegin) {
      next();
      if (cur().kind != Tok::Name) fail("expected a tag name after '{%', got " + describe(cur()));
      for (const auto& s : stops)
        if (cur().text == s) {
          next();
          return s;
        }
      body.push_back(parse_statement());
    } else {
      fail("unexpected " + describe(tk));
    }
  }
}

StmtPtr Parser::parse_statement() {
  std::string tag = cur().text;
  int line = cur().line;
  next();
  if (tag == "if") return parse_if(line);
  if (tag == "for") return parse_for(line);
  if (tag == "set") return parse_set(line);
  if (tag == "macro") return parse_macro(line);
  if (tag == "call") return parse_call_block(line);
  if (tag == "filter") {
    auto s = mk_stmt(Stmt::Kind::FilterBlock, line);
    s->expr = parse_filter(nullptr, true);
    expect_block_end("filter");
    s->bodies.emplace_back();
    parse_body(s->bodies[0], {"endfilter"}, "filter", line);
    expect_block_end("endfilter");
    return s;
  }
  if (tag == "generation") {
    auto s = mk_stmt(Stmt::Kind::Generation, line);
    expect_block_end("generation");
    s->bodies.emplace_back();
    parse_body(s->bodies[0], {"endgeneration"}, "generation", line);
    expect_block_end("endgeneration");
    return s;
  }
  if (tag == "break" || tag == "continue") {
    if (loops_ == 0) fail_at("'" + tag + "' outside of a loop", line);
    expect_block_end(tag);
    return mk_stmt(tag == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue, line);
  }
  static const char* kKnown[] = {"include", "import", "from",       "extends", "block",
                                 "raw",     "with",   "autoescape", "do",      "trans"};
  for (const char* k : kKnown)
    if (tag == k) fail_at("unsupported tag '" + tag + "' (chat templates render standalone)", line);
  fail_at("unknown tag '" + tag + "'", line);
}

StmtPtr Parser::parse_if(int line) {
  auto s = mk_stmt(Stmt::Kind::If, line);
  s->conds.push_back(parse_tuple(false, false));
  expect_block_end("if");
  for (;;) {
    s->bodies.emplace_back();
    std::string stop = parse_body(s->bodies.back(), {"elif", "else", "endif"}, "if", line);
    if (stop == "elif") {
      s->conds.push_back(parse_tuple(false, false));
      expect_block_end("elif");
      continue;
    }
    if (stop == "else") {
      expect_block_end("else");
      parse_body(s->else_body, {"endif"}, "if", line);
    }
    expect_block_end("endif");
    return s;
  }
}

void Parser::parse_targets(std::vector<std::string>& out) {
  bool paren = skip_op("(");
  do {
    if (paren && is_op(")")) break;
    out.push_back(expect_name());
  } while (skip_op(","));
  if (paren) expect_op(")");
}

StmtPtr Parser::parse_for(int line) {
  auto s = mk_stmt(Stmt::Kind::For, line);
  parse_targets(s->targets);
  if (!skip_name("in")) fail("expected 'in' in 'for', got " + describe(cur()));
  s->expr = parse_tuple(false, false, "recursive");
  if (skip_name("if")) s->cond = parse_expression(true);
  if (is_name("recursive")) fail("recursive loops are not supported");
  expect_block_end("for");
  ++loops_;
  s->bodies.emplace_back();
  std::string stop = parse_body(s->bodies[0], {"else", "endfor"}, "for", line);
  --loops_;
  if (stop == "else") {
    expect_block_end("else");
    parse_body(s->else_body, {"endfor"}, "for", line);
  }
  expect_block_end("endfor");
  return s;
}

StmtPtr Parser::parse_set(int line) {
  auto s = mk_stmt(Stmt::Kind::Set, line);
  std::string first = expect_name();
  s->targets.push_back(first);
  if (skip_op(".")) {
    s->text = expect_name();  // {% set ns.attr = ... %}
  } else {
    while (skip_op(",")) s->targets.push_back(expect_name());
  }
  if (skip_op("=")) {
    s->expr = parse_tuple(true, false);
    expect_block_end("set");
    return s;
  }
  if (s->targets.size() != 1 || !s->text.empty())
    fail("expected '=' in 'set', got " + describe(cur()));
  s->kind = Stmt::Kind::SetBlock;
  if (is_op("|")) s->expr = parse_filter(nullptr, false);
  expect_block_end("set");
  s->bodies.emplace_back();
  parse_body(s->bodies[0], {"endset"}, "set", line);
  expect_block_end("endset");
  return s;
}

void Parser::parse_params(std::vector<std::pair<std::string, ExprPtr>>& params) {
  expect_op("(");
  while (!is_op(")")) {
    if (!params.empty()) expect_op(",");
    if (is_op(")")) break;
    std::string n = expect_name();
    ExprPtr def;
    if (skip_op("=")) def = parse_expression(true);
    params.emplace_back(n, std::move(def));
  }
  next();
}

StmtPtr Parser::parse_macro(int line) {
  auto s = mk_stmt(Stmt::Kind::Macro, line);
  s->text = expect_name();
  parse_params(s->params);
  expect_block_end("macro");
  int saved = loops_;
  loops_ = 0;
  s->bodies.emplace_back();
  parse_body(s->bodies[0], {"endmacro"}, "macro", line);
  loops_ = saved;
  if (cur().kind == Tok::Name) next();  // {% endmacro name %}
  expect_block_end("endmacro");
  return s;
}

StmtPtr Parser::parse_call_block(int line) {
  auto s = mk_stmt(Stmt::Kind::CallBlock, line);
  if (is_op("(")) parse_params(s->params);
  s->expr = parse_expression(true);
  if (s->expr->kind != Expr::Kind::Call) fail_at("'call' expects a macro call", line);
  expect_block_end("call");
  s->bodies.emplace_back();
  parse_body(s->bodies[0], {"endcall"}, "call", line);
  expect_block_end("endcall");
  return s;
}

// jinja2 rejects an unknown filter or test when it compiles the template, except in a "soft"
// frame (an if-statement's tests and bodies, a conditional expression), where it fails only if
// reached; loops, macros and filter/call blocks open a hard frame again.
void check_expr(const Expr& e, bool soft, const std::string& name) {
  bool inner_soft = soft || e.kind == Expr::Kind::Cond;
  if (!inner_soft && e.kind == Expr::Kind::Filter && !has_filter(e.name))
    UNILLM_THROW(ConfigError, "[jinja] ", name, " line ", e.line, ": no filter named '", e.name,
                 "'");
  if (!inner_soft && e.kind == Expr::Kind::Test && !has_test(e.name))
    UNILLM_THROW(ConfigError, "[jinja] ", name, " line ", e.line, ": no test named '", e.name, "'");
  for (const auto& a : e.args)
    if (a) check_expr(*a, inner_soft, name);
  for (const auto& kv : e.kwargs) check_expr(*kv.second, inner_soft, name);
}

void check_body(const Body& body, bool soft, const std::string& name) {
  for (const auto& s : body) {
    bool if_stmt = s->kind == Stmt::Kind::If;
    bool hard_inner = !if_stmt && s->kind != Stmt::Kind::Set && s->kind != Stmt::Kind::Output &&
                      s->kind != Stmt::Kind::SetBlock;
    if (s->expr) check_expr(*s->expr, soft, name);
    if (s->cond) check_expr(*s->cond, false, name);
    for (const auto& c : s->conds) check_expr(*c, true, name);
    for (const auto& p : s->params)
      if (p.second) check_expr(*p.second, false, name);
    for (const auto& b : s->bodies) check_body(b, if_stmt || (soft && !hard_inner), name);
    check_body(s->else_body, if_stmt || (soft && !hard_inner), name);
  }
}

}  // namespace parse_detail

Body parse_tokens(const std::vector<Token>& tokens, const std::string& name) {
  Body body = parse_detail::Parser(tokens, name).run();
  parse_detail::check_body(body, false, name);
  return body;
}

}  // namespace unillm::jinja
