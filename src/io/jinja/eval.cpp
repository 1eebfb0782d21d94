// Statement execution and expression evaluation over the syntax tree. Python semantics where
// templates depend on them: `and`/`or` return an operand, int/int division gives a float, `%`
// and `//` floor, chained comparisons, truthiness of empty strings and lists.
#include "io/jinja/eval.h"

#include <cmath>

#include "core/error.h"
#include "io/jinja/builtins.h"
#include "io/jinja/eval_ops.h"

namespace unillm::jinja {
namespace {

struct Scope;
using ScopePtr = std::shared_ptr<Scope>;
struct Scope {
  ScopePtr parent;
  std::vector<std::pair<std::string, Value>> vars;
  const Value* lookup(const std::string& n) const {
    for (const Scope* s = this; s; s = s->parent.get())
      for (const auto& [k, v] : s->vars)
        if (k == n) return &v;
    return nullptr;
  }
  void set(const std::string& n, Value v) {
    for (auto& [k, old] : vars)
      if (k == n) {
        old = std::move(v);
        return;
      }
    vars.emplace_back(n, std::move(v));
  }
};
ScopePtr child(const ScopePtr& parent) {
  auto s = std::make_shared<Scope>();
  s->parent = parent;
  return s;
}

enum class Flow { Normal, Break, Continue };

class Renderer {
 public:
  Renderer(const std::string& name, const RenderLimits& limits) : name_(name), limits_(limits) {}

  std::string run(const Body& body, const Value& context) {
    auto root = std::make_shared<Scope>();
    for (const auto& [k, v] : context.entries()) root->set(k.to_str(), v);
    std::string out;
    exec(body, root, out);
    return out;
  }

 private:
  struct DepthGuard {
    Renderer* r;
    DepthGuard(Renderer* renderer, int line) : r(renderer) {
      if (++r->depth_ > r->limits_.max_depth)
        r->fail(line, "evaluation nested deeper than " + std::to_string(r->limits_.max_depth) +
                          " (runaway macro recursion?)");
      if (++r->steps_ > r->limits_.max_steps)
        r->fail(line, "template ran more than " + std::to_string(r->limits_.max_steps) + " steps");
    }
    ~DepthGuard() { --r->depth_; }
  };

  [[noreturn]] void fail(int line, const std::string& msg) const {
    UNILLM_THROW(ConfigError, "[jinja] ", name_, " line ", line, ": ", msg);
  }
  void write(std::string& out, const std::string& s, int line) const {
    if (out.size() + s.size() > limits_.max_output)
      fail(line, "rendered text exceeds " + std::to_string(limits_.max_output) + " bytes");
    out += s;
  }

  Flow exec(const Body& body, const ScopePtr& scope, std::string& out) {
    for (const auto& s : body) {
      Flow f = exec_stmt(*s, scope, out);
      if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
  }

  Flow exec_stmt(const Stmt& s, const ScopePtr& scope, std::string& out) {
    DepthGuard guard(this, s.line);
    try {
      return exec_inner(s, scope, out);
    } catch (const EvalError& e) {
      fail(s.line, e.what());
    }
  }

  Flow exec_inner(const Stmt& s, const ScopePtr& scope, std::string& out) {
    switch (s.kind) {
      case Stmt::Kind::Text:
        write(out, s.text, s.line);
        return Flow::Normal;
      case Stmt::Kind::Output:
        write(out, eval(*s.expr, scope).to_str(), s.line);
        return Flow::Normal;
      case Stmt::Kind::If:
        for (size_t i = 0; i < s.conds.size(); ++i)
          if (eval(*s.conds[i], scope).truthy()) return exec(s.bodies[i], scope, out);
        return exec(s.else_body, scope, out);
      case Stmt::Kind::For:
        exec_for(s, scope, out);
        return Flow::Normal;
      case Stmt::Kind::Set:
        exec_set(s, scope);
        return Flow::Normal;
      case Stmt::Kind::SetBlock: {
        std::string text;
        exec(s.bodies[0], scope, text);
        Value v(std::move(text));
        scope->set(s.targets[0], s.expr ? eval_filter(*s.expr, scope, &v) : v);
        return Flow::Normal;
      }
      case Stmt::Kind::Macro:
        scope->set(s.text, make_macro(s, scope));
        return Flow::Normal;
      case Stmt::Kind::CallBlock:
        write(out, call_block(s, scope).to_str(), s.line);
        return Flow::Normal;
      case Stmt::Kind::FilterBlock: {
        std::string text;
        exec(s.bodies[0], child(scope), text);
        Value v(std::move(text));
        write(out, eval_filter(*s.expr, scope, &v).to_str(), s.line);
        return Flow::Normal;
      }
      case Stmt::Kind::Generation:
        return exec(s.bodies[0], child(scope), out);
      case Stmt::Kind::Break:
        return Flow::Break;
      case Stmt::Kind::Continue:
        return Flow::Continue;
    }
    return Flow::Normal;
  }

  void bind_targets(const std::vector<std::string>& targets, const Value& v, Scope& scope) {
    if (targets.size() == 1) {
      scope.set(targets[0], v);
      return;
    }
    std::vector<Value> parts = v.is_list() || v.is_string() ? iterate(v) : std::vector<Value>{};
    if (!v.is_list() && !v.is_string())
      throw EvalError(std::string("cannot unpack non-iterable ") + kind_name(v) + " object");
    if (parts.size() != targets.size())
      throw EvalError(parts.size() > targets.size() ? "too many values to unpack"
                                                    : "not enough values to unpack");
    for (size_t i = 0; i < targets.size(); ++i) scope.set(targets[i], parts[i]);
  }

  void exec_set(const Stmt& s, const ScopePtr& scope) {
    Value v = eval(*s.expr, scope);
    if (s.text.empty()) {
      bind_targets(s.targets, v, *scope);
      return;
    }
    const Value* ns = scope->lookup(s.targets[0]);
    if (!ns || !ns->is_namespace())
      throw EvalError("cannot assign attribute on non-namespace object '" + s.targets[0] + "'");
    ns->set(s.text, std::move(v));
  }

  void exec_for(const Stmt& s, const ScopePtr& scope, std::string& out) {
    Value seq = eval(*s.expr, scope);
    if (!seq.is_list() && !seq.is_dict() && !seq.is_string() && !seq.is_undefined())
      throw EvalError(std::string("'") + kind_name(seq) + "' object is not iterable");
    std::vector<Value> items = iterate(seq);
    if (s.cond) {
      std::vector<Value> kept;
      for (const Value& item : items) {
        auto probe = child(scope);
        bind_targets(s.targets, item, *probe);
        if (eval(*s.cond, probe).truthy()) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      exec(s.else_body, child(scope), out);
      return;
    }
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      auto iter = child(scope);
      Value loop = Value::dict(
          {{"index", Value(i + 1)},
           {"index0", Value(i)},
           {"revindex", Value(n - i)},
           {"revindex0", Value(n - i - 1)},
           {"first", Value(i == 0)},
           {"last", Value(i == n - 1)},
           {"length", Value(n)},
           {"depth", Value(1)},
           {"depth0", Value(0)},
           {"previtem", i > 0 ? items[i - 1] : Value::undefined("'loop.previtem' is undefined")},
           {"nextitem",
            i + 1 < n ? items[i + 1] : Value::undefined("'loop.nextitem' is undefined")}});
      loop.set("cycle", Value::function("loop.cycle", [i](const CallArgs& a) {
                 if (a.pos.empty()) throw EvalError("no items for cycling given");
                 return a.pos[static_cast<size_t>(i) % a.pos.size()];
               }));
      iter->set("loop", loop);
      bind_targets(s.targets, items[i], *iter);
      if (exec(s.bodies[0], iter, out) == Flow::Break) break;
    }
  }

  // Binds a macro's (or caller's) parameters: positional, then keywords, then defaults;
  // surplus arguments land in varargs / kwargs as jinja2 exposes them.
  void bind_params(const Stmt& def, const CallArgs& args, const ScopePtr& scope) {
    Dict extra_kw;
    List varargs;
    for (size_t i = 0; i < args.pos.size(); ++i) {
      if (i < def.params.size())
        scope->set(def.params[i].first, args.pos[i]);
      else
        varargs.push_back(args.pos[i]);
    }
    for (const auto& [k, v] : args.kw) {
      bool known = k == "caller";
      for (const auto& p : def.params) known = known || p.first == k;
      if (known)
        scope->set(k, v);
      else
        extra_kw.emplace_back(Value(k), v);
    }
    for (size_t i = args.pos.size(); i < def.params.size(); ++i) {
      const auto& [pname, pdef] = def.params[i];
      bool given = false;
      for (const auto& kv : args.kw) given = given || kv.first == pname;
      if (given) continue;
      scope->set(pname, pdef ? eval(*pdef, scope)
                             : Value::undefined("parameter '" + pname + "' was not provided"));
    }
    scope->set("varargs", Value::list(std::move(varargs), /*tuple=*/true));
    scope->set("kwargs", Value::dict(std::move(extra_kw)));
  }

  static ScopePtr lock_scope(const std::weak_ptr<Scope>& w, const std::string& what) {
    ScopePtr s = w.lock();
    if (!s) throw EvalError("macro '" + what + "' called after the scope it was defined in ended");
    return s;
  }

  Value make_macro(const Stmt& def, const ScopePtr& scope) {
    const Stmt* d = &def;
    std::weak_ptr<Scope> weak = scope;  // the scope holds the macro: a strong ref would leak
    return Value::function(def.text, [this, d, weak](const CallArgs& args) {
      DepthGuard guard(this, d->line);
      auto local = child(lock_scope(weak, d->text));
      bind_params(*d, args, local);
      std::string text;
      exec(d->bodies[0], local, text);
      return Value(std::move(text));
    });
  }

  Value call_block(const Stmt& s, const ScopePtr& scope) {
    const Stmt* d = &s;
    std::weak_ptr<Scope> weak = scope;
    Value caller = Value::function("caller", [this, d, weak](const CallArgs& args) {
      DepthGuard guard(this, d->line);
      auto local = child(lock_scope(weak, "caller"));
      bind_params(*d, args, local);
      std::string text;
      exec(d->bodies[0], local, text);
      return Value(std::move(text));
    });
    const Expr& call = *s.expr;
    Value callee = eval(*call.args[0], scope);
    CallArgs args = eval_args(call, scope, 1);
    args.kw.emplace_back("caller", caller);
    return invoke(callee, args);
  }

  CallArgs eval_args(const Expr& e, const ScopePtr& scope, size_t first) {
    CallArgs a;
    for (size_t i = first; i < e.args.size(); ++i) a.pos.push_back(eval(*e.args[i], scope));
    for (const auto& [k, v] : e.kwargs) a.kw.emplace_back(k, eval(*v, scope));
    return a;
  }

  Value invoke(const Value& callee, const CallArgs& args) {
    if (callee.is_undefined()) fail_undefined(callee);
    if (!callee.is_function())
      throw EvalError(std::string("'") + kind_name(callee) + "' object is not callable");
    return callee.fn()(args);
  }

  // A filter chain; `injected` replaces the missing base of {% filter %} / {% set x | f %}.
  Value eval_filter(const Expr& e, const ScopePtr& scope, const Value* injected) {
    Value base;
    if (!e.args[0])
      base = *injected;
    else if (injected && e.args[0]->kind == Expr::Kind::Filter)
      base = eval_filter(*e.args[0], scope, injected);
    else
      base = eval(*e.args[0], scope);
    return call_filter(e.name, base, eval_args(e, scope, 1));
  }

  Value eval(const Expr& e, const ScopePtr& scope) {
    DepthGuard guard(this, e.line);
    try {
      return eval_inner(e, scope);
    } catch (const EvalError& err) {
      fail(e.line, err.what());
    }
  }

  // Operators: and/or short-circuit and return an operand; comparisons chain as in Python.
  Value eval_operator(const Expr& e, const ScopePtr& scope) {
    switch (e.kind) {
      case Expr::Kind::Unary: {
        Value v = eval(*e.args[0], scope);
        if (e.name == "not") return Value(!v.truthy());
        return unary_op(e.name, v);
      }
      case Expr::Kind::Binary: {
        if (e.name == "and" || e.name == "or") {
          Value l = eval(*e.args[0], scope);
          if (l.truthy() == (e.name == "or")) return l;
          return eval(*e.args[1], scope);
        }
        return binary_op(e.name, eval(*e.args[0], scope), eval(*e.args[1], scope),
                         limits_.max_output);
      }
      case Expr::Kind::Compare: {
        Value left = eval(*e.args[0], scope);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value right = eval(*e.args[i + 1], scope);
          if (!compare_op(e.ops[i], left, right)) return Value(false);
          left = std::move(right);
        }
        return Value(true);
      }
      case Expr::Kind::Cond:
        if (eval(*e.args[0], scope).truthy()) return eval(*e.args[1], scope);
        return e.args[2] ? eval(*e.args[2], scope) : Value::undefined("conditional without else");
      default:
        break;
    }
    return Value();
  }

  Value eval_inner(const Expr& e, const ScopePtr& scope) {
    switch (e.kind) {
      case Expr::Kind::Const:
        return e.value;
      case Expr::Kind::Name: {
        if (const Value* v = scope->lookup(e.name)) return *v;
        Value g = global_value(e.name);
        return g.is_undefined() ? Value::undefined("'" + e.name + "' is undefined") : g;
      }
      case Expr::Kind::List:
      case Expr::Kind::Tuple: {
        List items;
        for (const auto& a : e.args) items.push_back(eval(*a, scope));
        return Value::list(std::move(items), e.kind == Expr::Kind::Tuple);
      }
      case Expr::Kind::Dict: {
        Value d = Value::dict();
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          Value k = eval(*e.args[i], scope);
          if (k.is_list() || k.is_dict() || k.is_function() || k.is_undefined())
            throw EvalError(std::string("unhashable dict key of type '") + kind_name(k) + "'");
          d.set(k, eval(*e.args[i + 1], scope));
        }
        return d;
      }
      case Expr::Kind::Attr:
        return get_attribute(eval(*e.args[0], scope), e.name);
      case Expr::Kind::Item:
        return get_item(eval(*e.args[0], scope), eval(*e.args[1], scope));
      case Expr::Kind::Slice: {
        Value parts[3];
        for (int i = 0; i < 3; ++i)
          if (e.args[i + 1])
            parts[i] = eval(*e.args[i + 1], scope);
          else
            parts[i] = Value::none();
        return slice(eval(*e.args[0], scope), parts[0], parts[1], parts[2]);
      }
      case Expr::Kind::Call:
        return invoke(eval(*e.args[0], scope), eval_args(e, scope, 1));
      case Expr::Kind::Filter:
        return eval_filter(e, scope, nullptr);
      case Expr::Kind::Test: {
        bool r = call_test(e.name, eval(*e.args[0], scope), eval_args(e, scope, 1));
        return Value(r != e.negated);
      }
      case Expr::Kind::Unary:
      case Expr::Kind::Binary:
      case Expr::Kind::Compare:
      case Expr::Kind::Cond:
        return eval_operator(e, scope);
    }
    return Value();
  }

  const std::string& name_;
  const RenderLimits& limits_;
  int depth_ = 0;
  uint64_t steps_ = 0;
};

}  // namespace

std::string render_body(const Body& body, const Value& context, const std::string& name,
                        const RenderLimits& limits) {
  return Renderer(name, limits).run(body, context);
}

}  // namespace unillm::jinja
