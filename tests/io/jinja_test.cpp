// unillm::jinja construct by construct against hand-written expected output (the values are what
// Python's jinja2 prints under transformers' settings), plus the error cases: each must throw a
// ConfigError naming the template and line, never render empty.
#include "io/jinja/jinja.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace unillm::jinja {
namespace {

using nlohmann::ordered_json;

std::string R(const std::string& src, const ordered_json& ctx = ordered_json::object()) {
  return parse(src, "t").render(ctx);
}

std::string error_of(const std::string& src, const ordered_json& ctx = ordered_json::object()) {
  try {
    parse(src, "t.jinja").render(ctx);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Jinja, TextOutputAndLiterals) {
  EXPECT_EQ(R("a{{ 'b' }}c"), "abc");
  EXPECT_EQ(R("{{ 1 }} {{ 1.0 }} {{ 1e20 }} {{ 1e-5 }} {{ 0.1 }} {{ true }} {{ None }}"),
            "1 1.0 1e+20 1e-05 0.1 True None");
  EXPECT_EQ(R("{{ [1, 'a', none, (1,), {'k': \"v'\"}] }}"), "[1, 'a', None, (1,), {'k': \"v'\"}]");
  EXPECT_EQ(R("{{ 'a\\nb\\t\\u00e9\\x41' }}"),
            "a\nb\t\xC3\xa9"
            "A");
  EXPECT_EQ(R("{{ 'ab' 'cd' }}"), "abcd");
  EXPECT_EQ(R("{# comment #}x"), "x");
  EXPECT_EQ(R("line\n"), "line");  // one trailing newline dropped, as jinja2
}

TEST(Jinja, Arithmetic) {
  EXPECT_EQ(
      R("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 2 ** 3 ** 2 }}"),
      "3 -4 2 3.5 1024 64");
  EXPECT_EQ(
      R("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 'ab' * 2 }} {{ [1] + [2] }} {{ 1 ~ 'x' ~ none }}"),
      "7 9 abab [1, 2] 1xNone");
  EXPECT_EQ(R("{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' in 'cat' }} {{ 2 not in [1] }}"),
            "True False True True");
  EXPECT_EQ(
      R("{{ 0 or 'x' }} {{ 1 and 'y' }} {{ not 0 }} {{ 'a' if false }}|{{ 'b' if 0 else 'c' }}"),
      "x y True |c");
}

TEST(Jinja, WhitespaceControl) {
  // trim_blocks eats the newline after %}; lstrip_blocks the indentation before {%.
  EXPECT_EQ(R("{% if true %}\n  x\n  {% endif %}\ny"), "  x\ny");
  EXPECT_EQ(R("a  {%- if true -%}  b  {%- endif %}"), "ab");
  EXPECT_EQ(R("a {{- 'b' -}} c"), "abc");
  EXPECT_EQ(R("a\n    {%+ if true %}b{% endif %}"), "a\n    b");
  EXPECT_EQ(R("{{ 'x' }}  {% if true %}y{% endif %}"), "x  y");  // not at line start: kept
}

TEST(Jinja, ForLoops) {
  EXPECT_EQ(R("{% for x in [1,2,3] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}"
              "{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}"),
            "103TrueFalse3;212FalseFalse3;321FalseTrue3;");
  EXPECT_EQ(R("{% for x in [1,2,3,4] if x is even %}{{ x }}{% else %}none{% endfor %}"), "24");
  EXPECT_EQ(R("{% for x in [] %}{{ x }}{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(R("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }},{% endfor %}"),
            "a=1,b=2,");
  EXPECT_EQ(R("{% for x in range(5) %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 3 %}"
              "{% break %}{% endif %}{{ x }}{% endfor %}"),
            "02");
  EXPECT_EQ(R("{% for c in 'héllo' %}{{ c }}.{% endfor %}{{ 'héllo'|length }}"),
            "h.\xC3\xA9.l.l.o.5");
  EXPECT_EQ(R("{% for x in [1,2] %}{{ loop.cycle('a','b') }}{% endfor %}"), "ab");
}

TEST(Jinja, SetScopingAndNamespace) {
  // A set inside a loop stays in the loop; namespace() carries values out.
  EXPECT_EQ(R("{% set x = 1 %}{% for i in [1,2] %}{% set x = i %}{% endfor %}{{ x }}"), "1");
  EXPECT_EQ(R("{% set ns = namespace(n=0) %}{% for i in [1,2,3] %}{% set ns.n = ns.n + i %}"
              "{% endfor %}{{ ns.n }}"),
            "6");
  EXPECT_EQ(R("{% if true %}{% set y = 'in-if' %}{% endif %}{{ y }}"), "in-if");
  EXPECT_EQ(R("{% set a, b = 1, 2 %}{{ b }}{{ a }}"), "21");
  EXPECT_EQ(R("{% set block %}Hi {{ 'there' }}{% endset %}[{{ block }}]"), "[Hi there]");
  EXPECT_EQ(R("{% set up | upper %}abc{% endset %}{{ up }}"), "ABC");
}

TEST(Jinja, MacrosCallFilterGeneration) {
  EXPECT_EQ(R("{% macro m(a, b='d') %}{{ a }}-{{ b }}{% endmacro %}{{ m(1) }} {{ m(1, b=2) }}"),
            "1-d 1-2");
  EXPECT_EQ(R("{% macro w() %}<{{ caller() }}>{% endmacro %}{% call w() %}body{% endcall %}"),
            "<body>");
  EXPECT_EQ(R("{% filter upper %}abc{{ 'd' }}{% endfilter %}"), "ABCD");
  EXPECT_EQ(R("{% generation %}gen{% endgeneration %}"), "gen");
}

TEST(Jinja, AccessAndSlices) {
  ordered_json ctx = {{"m", {{"role", "user"}, {"content", "hi"}}}, {"l", {1, 2, 3, 4}}};
  EXPECT_EQ(R("{{ m.role }} {{ m['content'] }} {{ m.missing is defined }} {{ l[-1] }}", ctx),
            "user hi False 4");
  EXPECT_EQ(R("{{ l[1:3] }} {{ l[::-1] }} {{ l[:-1] }} {{ 'hello'[1:] }} {{ 'abc'[::-1] }}", ctx),
            "[2, 3] [4, 3, 2, 1] [1, 2, 3] ello cba");
  EXPECT_EQ(R("{{ m.get('role') }} {{ m.get('x', 'dflt') }} {{ m.keys()|list }}", ctx),
            "user dflt ['role', 'content']");
  EXPECT_EQ(R("{{ undefined_thing }}|{{ undefined_thing|default('d') }}"), "|d");
}

TEST(Jinja, Tests) {
  EXPECT_EQ(
      R("{{ none is none }} {{ 1 is number }} {{ true is number }} {{ 1 is integer }} "
        "{{ 'a' is string }} {{ {} is mapping }} {{ [] is iterable }} {{ 3 is odd }} "
        "{{ 6 is divisibleby 3 }} {{ 2 is equalto 2 }} {{ x is undefined }} {{ false is false }} "
        "{{ 1 is not string }}"),
      "True True True True True True True True True True True True True");
}

TEST(Jinja, Filters) {
  ordered_json ctx = {{"msgs",
                       {{{"role", "system"}, {"c", 1}},
                        {{"role", "user"}, {"c", 2}},
                        {{"role", "user"}, {"c", 3}}}}};
  EXPECT_EQ(R("{{ '  x  '|trim }}|{{ 'Ab'|upper }}{{ 'Ab'|lower }}|{{ 'hello world'|title }}|"
              "{{ 'hELLO'|capitalize }}|{{ 'aXa'|replace('a', 'b') }}|{{ [1,2]|join(', ') }}|"
              "{{ [3,1,2]|sort|list }}|{{ [1,2,3]|first }}{{ [1,2,3]|last }}|{{ [1,2]|length }}"),
            "x|ABab|Hello World|Hello|bXb|1, 2|[1, 2, 3]|13|2");
  EXPECT_EQ(R("{{ msgs|selectattr('role', 'equalto', 'user')|list|length }} "
              "{{ msgs|rejectattr('role', 'equalto', 'user')|map(attribute='c')|list }} "
              "{{ msgs|map(attribute='role')|unique|list }}",
              ctx),
            "2 [1] ['system', 'user']");
  EXPECT_EQ(R("{{ '3'|int + 1 }} {{ 'x'|int }} {{ '2.5'|float }} {{ -3|abs }} {{ 2.567|round(2) }} "
              "{{ 2.5|round }} {{ 'a'|string }} {{ '<b>'|e }} {{ 'ab'|center(6) }}| {{ 'a b "
              "c'|wordcount }}"),
            "4 0 2.5 3 2.57 2.0 a &lt;b&gt;   ab  | 3");
  EXPECT_EQ(R("{{ {'b': 1, 'a': 2}|dictsort }} {{ 'x\ny'|indent(2) }} {{ [1,2]|reverse|list }}"),
            "[('a', 2), ('b', 1)] x\n  y [2, 1]");
}

TEST(Jinja, ToJsonAsTransformers) {
  ordered_json ctx = {{"t", {{"name", "f"}, {"b", {1, 2.5, true, nullptr}}, {"u", "é\"\n"}}}};
  EXPECT_EQ(R("{{ t|tojson }}", ctx),
            "{\"name\": \"f\", \"b\": [1, 2.5, true, null], \"u\": \"\xC3\xA9\\\"\\n\"}");
  EXPECT_EQ(R("{{ {'a': [1]}|tojson(indent=2) }}"), "{\n  \"a\": [\n    1\n  ]\n}");
  EXPECT_EQ(R("{{ 'é'|tojson(ensure_ascii=true) }}"), "\"\\u00e9\"");
}

TEST(Jinja, StringMethods) {
  EXPECT_EQ(
      R("{{ ' a '.strip() }}|{{ 'xxay'.lstrip('x') }}|{{ 'a,b'.split(',') }}|{{ 'a b'.split() }}|"
        "{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'c')) }}|{{ 'abc'.find('c') }}|"
        "{{ 'a-b'.replace('-', '+') }}|{{ 'ab cd'.title() }}|{{ '-'.join(['a', 'b']) }}"),
      "a|ay|['a', 'b']|['a', 'b']|TrueTrue|2|a+b|Ab Cd|a-b");
}

TEST(Jinja, NonStringDictKeys) {
  // Python semantics: 1 == 1.0 == True as keys; json.dumps writes them as text.
  EXPECT_EQ(
      R("{% set d = {0: 'a', 1: 'b', none: 'n'} %}{{ d }} {{ d[0] }}{{ d[true] }}{{ d[1.0] }} "
        "{{ d|tojson }} {{ 0 in d }}"),
      "{0: 'a', 1: 'b', None: 'n'} abb {\"0\": \"a\", \"1\": \"b\", \"null\": \"n\"} True");
}

TEST(Jinja, ContextKeyOrderKept) {
  ordered_json ctx = ordered_json::parse(R"({"tools": [{"z": 1, "a": 2}]})");
  EXPECT_EQ(R("{{ tools[0]|tojson }}", ctx), "{\"z\": 1, \"a\": 2}");
}

TEST(Jinja, Errors) {
  EXPECT_NE(error_of("{% if x %}never closed").find("t.jinja line 1: unexpected end of template"),
            std::string::npos);
  EXPECT_NE(
      error_of("a\n{{ x|nosuchfilter }}").find("t.jinja line 2: no filter named 'nosuchfilter'"),
      std::string::npos);
  EXPECT_NE(error_of("\n\n{% include 'x' %}").find("line 3: unsupported tag 'include'"),
            std::string::npos);
  EXPECT_NE(error_of("{{ x is nosuchtest }}").find("no test named 'nosuchtest'"),
            std::string::npos);
  // An integer attribute past int64 (the jinja fuzzer's find): an error, not an abort.
  EXPECT_NE(error_of("{{ x.99999999999999999999999 }}").find("number '99999999999999999999999' out of range"),
            std::string::npos);
  // As jinja2, an unknown filter fails when the template is parsed, even in a loop that never
  // runs; only inside an if (jinja2's "soft" frame) it waits until it is reached.
  EXPECT_THROW(parse("{% for x in [] %}{{ x|nosuch }}{% endfor %}", "t"), ConfigError);
  EXPECT_EQ(R("{% if false %}{{ x|nosuch }}{% endif %}ok"), "ok");
  EXPECT_EQ(R("{{ '%s-%03d|%.1f|%%' % ('a', 7, 2.25) }}"), "a-007|2.2|%");
  EXPECT_NE(error_of("{{ 'unterminated }}").find("never closed"), std::string::npos);
  EXPECT_NE(error_of("{{ raise_exception('bad role') }}").find("line 1: raise_exception: bad role"),
            std::string::npos);
  EXPECT_NE(error_of("{{ x.y }}").find("'x' is undefined"), std::string::npos);
  EXPECT_NE(error_of("{{ 1 + 'a' }}").find("unsupported operand"), std::string::npos);
  EXPECT_NE(error_of("{% set l = [] %}{{ l.append(1) }}").find("unsafe"), std::string::npos);
  EXPECT_NE(error_of("{{ x|tojson }}").find("not JSON serializable"), std::string::npos);
  EXPECT_NE(error_of("{% break %}").find("outside of a loop"), std::string::npos);
  EXPECT_NE(error_of("{{ range(1000000)|length }}").find("range too big"), std::string::npos);
}

TEST(Jinja, LimitsStopRunawayTemplates) {
  EXPECT_NE(error_of("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").find("nested deeper"),
            std::string::npos);
  EXPECT_NE(error_of("{{ " + std::string(300, '(') + "1" + std::string(300, ')') + " }}")
                .find("too deeply"),
            std::string::npos);
  Template t = parse(
      "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}", "big");
  t.limits.max_output = 1 << 16;
  EXPECT_THROW(t.render(ordered_json::object()), ConfigError);
}

}  // namespace
}  // namespace unillm::jinja
