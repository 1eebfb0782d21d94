// The Parser class shared by parser.cpp (statements) and parser_expr.cpp (expressions).
// Internal to src/io/jinja/.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/jinja/ast.h"
#include "io/jinja/lexer.h"

namespace unillm::jinja::parse_detail {

constexpr int kMaxDepth = 400;  // nesting units; one parenthesised level costs about ten

class Parser {
 public:
  Parser(const std::vector<Token>& toks, const std::string& name) : t_(toks), name_(name) {}

  Body run() {
    Body body;
    parse_body(body, {}, "", 0);
    return body;
  }

 private:
  struct DepthGuard {
    Parser* p;
    explicit DepthGuard(Parser* parser) : p(parser) {
      if (++p->depth_ > kMaxDepth) p->fail("template nested too deeply (limit 400 levels)");
    }
    ~DepthGuard() { --p->depth_; }
  };
  // Left-associative chains (a + b + c..., a.b.c..., x|f|g...) build deep trees without
  // recursing here; each link still counts, so evaluating and freeing the tree stays bounded.
  struct ChainGuard {
    Parser* p;
    int n = 0;
    explicit ChainGuard(Parser* parser) : p(parser) {}
    void step() {
      ++n;
      if (++p->depth_ > kMaxDepth) p->fail("expression nested too deeply (limit 400 levels)");
    }
    ~ChainGuard() { p->depth_ -= n; }
  };

  [[noreturn]] void fail(const std::string& msg) { fail_at(msg, cur().line); }
  [[noreturn]] void fail_at(const std::string& msg, int line) {
    UNILLM_THROW(ConfigError, "[jinja] ", name_, " line ", line, ": ", msg);
  }
  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  void next() {
    if (i_ + 1 < t_.size()) ++i_;
  }
  bool is_op(const char* s) const { return cur().kind == Tok::Op && cur().text == s; }
  bool is_name(const char* s) const { return cur().kind == Tok::Name && cur().text == s; }
  bool skip_op(const char* s) {
    if (!is_op(s)) return false;
    next();
    return true;
  }
  bool skip_name(const char* s) {
    if (!is_name(s)) return false;
    next();
    return true;
  }
  std::string describe(const Token& t) const {
    switch (t.kind) {
      case Tok::Eof:
        return "end of template";
      case Tok::VarEnd:
        return "'}}'";
      case Tok::BlockEnd:
        return "'%}'";
      case Tok::Text:
        return "template text";
      case Tok::String:
        return "string";
      default:
        return "'" + t.text + "'";
    }
  }
  void expect_op(const char* s) {
    if (!skip_op(s)) fail(std::string("expected '") + s + "', got " + describe(cur()));
  }
  std::string expect_name() {
    if (cur().kind != Tok::Name) fail("expected a name, got " + describe(cur()));
    std::string n = cur().text;
    next();
    return n;
  }
  void expect_block_end(const std::string& tag) {
    if (cur().kind != Tok::BlockEnd)
      fail("expected '%}' to end '" + tag + "', got " + describe(cur()));
    next();
  }
  static ExprPtr mk(Expr::Kind k, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line;
    return e;
  }
  static StmtPtr mk_stmt(Stmt::Kind k, int line) {
    auto s = std::make_unique<Stmt>();
    s->kind = k;
    s->line = line;
    return s;
  }

  // Statements until one of `stops` ({% name ... %}); returns that name, with the cursor just
  // after it. `opener`/`open_line` say which tag is waiting, for the end-of-template error.
  std::string parse_body(Body& body, const std::vector<std::string>& stops,
                         const std::string& opener, int open_line);
  StmtPtr parse_statement();
  StmtPtr parse_if(int line);
  void parse_targets(std::vector<std::string>& out);
  StmtPtr parse_for(int line);
  StmtPtr parse_set(int line);
  void parse_params(std::vector<std::pair<std::string, ExprPtr>>& params);
  StmtPtr parse_macro(int line);
  StmtPtr parse_call_block(int line);

  // ---- expressions (parser_expr.cpp) ----------------------------------------------------
  bool tuple_end(const char* extra) const {
    if (cur().kind == Tok::VarEnd || cur().kind == Tok::BlockEnd || is_op(")")) return true;
    return extra && (is_name(extra) || (std::string(extra) == "recursive" && is_name("if")));
  }
  ExprPtr parse_tuple(bool condexpr, bool explicit_parens, const char* extra_end = nullptr);
  ExprPtr parse_expression(bool condexpr) { return condexpr ? parse_condexpr() : parse_or(); }
  ExprPtr parse_condexpr();
  ExprPtr binary(const std::string& op, ExprPtr l, ExprPtr r, int line);
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_left_assoc(const std::vector<const char*>& ops, ExprPtr (Parser::*sub)());
  ExprPtr parse_math1() { return parse_left_assoc({"+", "-"}, &Parser::parse_concat); }
  ExprPtr parse_concat() { return parse_left_assoc({"~"}, &Parser::parse_math2); }
  ExprPtr parse_math2() { return parse_left_assoc({"*", "/", "//", "%"}, &Parser::parse_pow); }
  ExprPtr parse_pow() { return parse_left_assoc({"**"}, &Parser::parse_unary_filtered); }
  ExprPtr parse_unary_filtered() { return parse_unary(true); }
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_list_or_dict(Expr::Kind kind, const char* close, int line);
  ExprPtr parse_postfix(ExprPtr e);
  ExprPtr parse_filter_expr(ExprPtr e);
  ExprPtr parse_subscript(ExprPtr base);
  // One subscript: an expression or a slice start:stop:step (parts may be omitted).
  ExprPtr parse_subscribed();
  void parse_call_args(Expr& e);
  ExprPtr parse_call(ExprPtr callee);
  std::string dotted_name();
  ExprPtr parse_filter(ExprPtr base, bool inline_start);
  ExprPtr parse_test(ExprPtr base);

  const std::vector<Token>& t_;
  const std::string& name_;
  size_t i_ = 0;
  int depth_ = 0;
  int loops_ = 0;
};

}  // namespace unillm::jinja::parse_detail
