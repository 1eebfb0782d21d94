// JSON grammars: json_object and compiled JSON Schemas accept valid documents (complete) and
// refuse invalid ones at the right byte; allowed_tokens matches the brute-force reference on the
// Llama 2 vocabulary; random token walks always give JSON that an independent validator accepts;
// unsupported schemas fail with the JSON pointer of the offending keyword.
#include "infer/json_schema.h"

#include <gtest/gtest.h>

#include <chrono>
#include <random>

#include "core/error.h"
#include "grammar_test_util.h"
#include "support/expect.h"

namespace unillm::infer {
namespace {

using nlohmann::json;
using testing::brute_force_allowed;
using testing::reject_at;

// Keeps the declared property order (nlohmann::json would sort the keys).
std::shared_ptr<const Grammar> compile(const char* schema) {
  return json_schema_grammar(nlohmann::ordered_json::parse(schema));
}

const TokenTrie& llama2_trie() {
  static const TokenTrie trie(testing::llama2_token_bytes());
  return trie;
}

void expect_accepted(const std::shared_ptr<const Grammar>& g, const std::string& doc) {
  bool complete = false;
  EXPECT_EQ(reject_at(g, doc, &complete), -1) << doc;
  EXPECT_TRUE(complete) << doc;
}

// `mark` points at the first refused byte: "{\"a\":1,^}".
void expect_refused(const std::shared_ptr<const Grammar>& g, const std::string& marked) {
  const size_t at = marked.find('^');
  ASSERT_NE(at, std::string::npos);
  const std::string doc = marked.substr(0, at) + marked.substr(at + 1);
  EXPECT_EQ(reject_at(g, doc), static_cast<int>(at)) << marked;
}

void expect_incomplete(const std::shared_ptr<const Grammar>& g, const std::string& doc) {
  bool complete = true;
  EXPECT_EQ(reject_at(g, doc, &complete), -1) << doc;
  EXPECT_FALSE(complete) << doc;
}

TEST(JsonObjectGrammar, AcceptsRfc8259Objects) {
  auto g = json_object_grammar();
  for (const std::string doc :
       {"{}", "{ }", "{\"a\":1}", "{\"a\": [1, -2.5e+10, 0, 0.25, 1E3], \"b\": {\"c\": null}}",
        "{\"s\":\"tab\\t quote\\\" slash\\/ \\\\ \\u00e9 \\uD83D\\uDE00 caf\xC3\xA9 "
        "\xF0\x9F\x98\x80\"}",
        "{\n  \"x\": true,\n  \"y\": false\n}", "{\"\":[[[]],{}]}", "{\"n\":-0}"}) {
    expect_accepted(g, doc);
    EXPECT_TRUE(json::accept(doc)) << doc;
  }
}

TEST(JsonObjectGrammar, RefusesInvalidJsonAtTheRightByte) {
  auto g = json_object_grammar();
  expect_refused(g, "^[1]");         // not an object
  expect_refused(g, "^ {}");         // no leading whitespace
  expect_refused(g, "{\"a\":1,^}");  // trailing comma
  expect_refused(g, "{^a:1}");       // unquoted key
  expect_refused(g, "{\"a\"^,1}");
  expect_refused(g, "{\"a\":0^1}");       // leading zero
  expect_refused(g, "{\"a\":\"\\^x\"}");  // bad escape
  expect_refused(g, "{\"a\":\"\\u12^G4\"}");
  expect_refused(g, "{\"a\":\"\\ud800^\"}");       // lone high surrogate
  expect_refused(g, "{\"a\":\"\\ud^c00\"}");       // lone low surrogate
  expect_refused(g, "{\"a\":\"^\n\"}");            // raw control byte
  expect_refused(g, "{\"a\":\"^\xC0\x80\"}");      // overlong UTF-8
  expect_refused(g, "{\"a\":\"\xED^\xA0\x80\"}");  // UTF-8 surrogate
  expect_refused(g, "{\"a\":tru^x}");
  expect_refused(g, "{\"a\":1}^ ");                                // nothing after the value
  expect_refused(g, "{ ^ \"a\":1}");                               // one space at most
  expect_refused(g, "{\n" + std::string(20, ' ') + "^ \"a\":1}");  // newline + 20 blanks at most
  expect_refused(g, "{\"a\":1.^}");
  expect_incomplete(g, "{\"a\":[1,{\"b\":2}]");
  GrammarMatcher m(g);
  ASSERT_TRUE(m.accept("{\"a\":1}"));
  EXPECT_TRUE(m.complete());
  EXPECT_FALSE(m.can_continue());  // the engine may stop here
}

const char* kPerson = R"({
  "type": "object",
  "title": "Person",
  "properties": {
    "name": {"type": "string", "maxLength": 5, "description": "given name"},
    "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "email": {"type": "string"},
    "tags": {"type": "array", "items": {"enum": ["a", "b", 3, null]}, "minItems": 1, "maxItems": 2}
  },
  "required": ["name", "age"]
})";

TEST(JsonSchemaGrammar, ObjectPropertiesInDeclaredOrder) {
  auto g = json_schema_grammar(nlohmann::ordered_json::parse(kPerson));
  expect_accepted(g, R"({"name":"Bob","age":42})");
  expect_accepted(g, R"({"name":"Bob","age":0,"email":"b@x"})");
  expect_accepted(g, R"({ "name": "\u00e9t\u00e9", "age": 150, "tags": ["a", null] })");
  expect_accepted(g, R"({"name":"","age":7,"tags":[3]})");
  expect_refused(g, R"({"name":"Bob","age":^"42"})");     // wrong type
  expect_refused(g, R"({"name":"Bob"^})");                // missing required
  expect_refused(g, R"({"^age":1,"name":"x"})");          // declared order
  expect_refused(g, R"({"name":"x","age":1,"^zzz":1})");  // no extra members
  expect_refused(g, R"({"name":"Alice^B","age":1})");     // maxLength 5 (characters)
  expect_accepted(g, "{\"name\":\"\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\",\"age\":1}");
  expect_refused(g, R"({"name":"x","age":15^1})");                   // maximum
  expect_refused(g, R"({"name":"x","age":^-1})");                    // minimum
  expect_refused(g, R"({"name":"x","age":1,"tags":[^]})");           // minItems
  expect_refused(g, R"({"name":"x","age":1,"tags":["a",3^,"b"]})");  // maxItems
  expect_refused(g, R"({"name":"x","age":1,"tags":["^c"]})");        // enum
  // Sorted keys with nlohmann::json: age, email, name, tags.
  auto sorted = json_schema_grammar(json::parse(kPerson));
  expect_accepted(sorted, R"({"age":42,"name":"Bob"})");
}

TEST(JsonSchemaGrammar, ArraysTuplesEnumsAndUnions) {
  auto tuple = compile(R"({"type": "array",
      "prefixItems": [{"type": "integer"}, {"type": "boolean"}], "items": false})");
  expect_accepted(tuple, "[]");
  expect_accepted(tuple, "[1, true]");
  expect_refused(tuple, "[1, ^2]");
  expect_refused(tuple, "[1, true^, null]");

  auto bounded = compile(R"({"type": "array", "items": {"type": "null"},
      "minItems": 2, "maxItems": 3})");
  expect_refused(bounded, "[null^]");
  expect_accepted(bounded, "[null,null]");
  expect_refused(bounded, "[null,null,null^,null]");

  auto nullable = compile(R"({"type": ["string", "null"], "minLength": 2})");
  expect_accepted(nullable, "null");
  expect_accepted(nullable, "\"ab\"");
  expect_refused(nullable, "\"a^\"");

  auto choice = compile(R"({"oneOf": [{"const": {"k": [1, "x"]}},
      {"type": "number"}, {"allOf": [{"type": "boolean"}]}], "description": "d"})");
  expect_accepted(choice, "{\"k\":[1,\"x\"]}");
  expect_accepted(choice, "-1.5e3");
  expect_accepted(choice, "false");
  expect_refused(choice, "{^ \"k\":[1,\"x\"]}");  // an enum value has one spelling
  expect_refused(choice, "^\"x\"");

  auto any = compile("{}");
  for (const std::string doc : {"1", "[1,{}]", "\"x\"", "null", "{\"a\":{}}"})
    expect_accepted(any, doc);
}

TEST(JsonSchemaGrammar, IntegerRanges) {
  auto g = compile(R"({"type": "integer", "minimum": -12, "exclusiveMaximum": 1007})");
  for (int v = -30; v <= 1100; ++v) {
    const std::string text = std::to_string(v);
    bool complete = false;
    const bool in = v >= -12 && v <= 1006;
    const bool ok = reject_at(g, text, &complete) == -1 && complete;
    EXPECT_EQ(ok, in) << v;
  }
  expect_refused(g, "-^0");
  expect_refused(g, "0^0");
  auto positive = compile(R"({"type": "integer", "exclusiveMinimum": 0})");
  expect_refused(positive, "^0");
  expect_accepted(positive, "1234567890123456");
  expect_refused(positive, "^-1");
}

TEST(JsonSchemaGrammar, RecursiveRefsAndFormats) {
  auto tree = compile(R"({
    "$defs": {"node": {"type": "object", "properties": {
      "value": {"type": "integer"},
      "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
      "required": ["value", "children"], "additionalProperties": false}},
    "$ref": "#/$defs/node"})");
  expect_accepted(
      tree,
      R"({"value":1,"children":[{"value":2,"children":[]},{"value":3,"children":[{"value":4,"children":[]}]}]})");
  expect_refused(tree, R"({"value":1,"children":[{"value":2^}]})");

  auto formats = compile(R"({"type": "object", "properties": {
      "d": {"type": "string", "format": "date"}, "t": {"type": "string", "format": "date-time"},
      "u": {"type": "string", "format": "uuid"}}, "required": ["d", "t", "u"]})");
  expect_accepted(
      formats,
      R"({"d":"2024-02-29","t":"2023-12-31T23:59:59.5+01:00","u":"123e4567-e89b-12d3-a456-426614174000"})");
  expect_refused(formats, R"({"d":"2023-02-2^9")");
  expect_refused(formats, R"({"d":"2023-1^3-01")");
  expect_refused(formats, R"({"d":"2023-04-3^1")");
  expect_refused(formats, R"({"d":"1900-02-2^9")");
  expect_accepted(
      formats,
      R"({"d":"2000-02-29","t":"2023-01-01T00:00:00Z","u":"00000000-0000-0000-0000-000000000000"})");
  expect_refused(formats, R"({"d":"2000-02-29","t":"2023-01-01T2^4:00:00Z")");
}

TEST(JsonSchemaGrammar, AdditionalPropertiesAfterDeclaredOnes) {
  auto g = compile(R"({"type": "object", "properties": {"a": {"type": "integer"}},
      "additionalProperties": {"type": "boolean"}})");
  expect_accepted(g, R"({"a":1,"ab":true,"":false,"x y":true})");
  expect_accepted(g, R"({"b":true})");
  expect_refused(g, R"({"a":1,"a^":true})");  // never a declared name
  expect_refused(g, R"({"b":true,"a^":1})");
  expect_refused(g, R"({"b":^1})");
  expect_refused(g, R"({"b^\u0061":true})");  // extra keys have no escapes
  auto open = compile(R"({"type": "object"})");
  expect_accepted(open, R"({"anything":[1,2],"b":{}})");
  auto closed = compile(R"({"type": "object", "additionalProperties": false})");
  expect_refused(closed, R"({^"a":1})");
}

TEST(JsonSchemaGrammar, UnsupportedSchemasNameThePlace) {
  auto fails = [](const char* schema, const std::string& part) {
    unillm::testing::expect_throw_with<ConfigError>(
        [&] { json_schema_grammar(json::parse(schema)); }, part);
  };
  fails(R"({"type": "object", "properties": {"age": {"type": "string", "pattern": "^a"}}})",
        "[json_schema] /properties/age: keyword 'pattern' is not supported");
  fails(R"({"type": "number", "multipleOf": 2})",
        "[json_schema] /: keyword 'multipleOf' is not supported");
  fails(R"({"type": "number", "minimum": 2})",
        "keyword 'minimum' is supported only for type 'integer'");
  fails(R"({"type": "string", "format": "email"})", "/: format 'email' is not supported");
  fails(R"({"items": {"type": "strin"}})", "/items: unknown type 'strin'");
  fails(R"({"$ref": "#/$defs/missing"})", "/: $ref '#/$defs/missing' does not resolve");
  fails(R"({"$ref": "other.json#/a"})", "only references inside the schema");
  fails(R"({"anyOf": [{"$ref": "#"}, {"type": "null"}]})", "left recursion");
  fails(R"({"allOf": [{"type": "string"}, {"maxLength": 2}]})",
        "'allOf' with more than one schema");
  fails(R"({"type": "object", "properties": {"a": {}}, "required": ["b"]})",
        "required property 'b' is not in 'properties'");
  fails(R"({"type": "string", "minLength": 3, "maxLength": 2})",
        "'minLength' is greater than 'maxLength'");
  fails(R"({"type": "string", "enum": ["a"], "maxLength": 2})",
        "keyword 'maxLength' cannot be combined with 'enum'");
  fails(R"({"prefixItems": [false]})", "/prefixItems/0: the schema false matches nothing");
  fails(R"({"type": "integer", "enum": ["a"]})", "no value of 'enum' has the type");
  fails(R"({"properties": {"a/b": {"not": {}}}})",
        "/properties/a~1b: keyword 'not' is not supported");
  // Schemas come from request bodies: nesting and grammar size are capped.
  std::string deep = R"({"type": "string"})";
  for (int i = 0; i < 100; ++i) deep = R"({"type": "array", "items": )" + deep + "}";
  fails(deep.c_str(), "nests deeper than 64 levels");
  fails(R"({"type": "object", "properties": {"a": {"type": "string", "maxLength": 100000},
           "b": {"type": "string", "maxLength": 100000}, "c": {"type": "string", "maxLength": 100000}}})",
        "grammar rules");
}

// allowed_tokens against the brute force on the real vocabulary, at many states of two
// documents (every state on a sample of the vocabulary, the whole vocabulary at a few).
TEST(JsonSchemaGrammar, AllowedTokensMatchesBruteForceOnLlama2Vocabulary) {
  const std::vector<std::string>& vocab = testing::llama2_token_bytes();
  std::vector<std::string> sample;
  std::mt19937 rng(11);
  for (size_t i = 0; i < vocab.size(); ++i)
    sample.push_back(i < 300 || rng() % 16 == 0 ? vocab[i] : "");
  const TokenTrie sample_trie(sample);
  const std::pair<std::shared_ptr<const Grammar>, std::string> cases[] = {
      {json_object_grammar(),
       "{\"k\\u00e9y\": [1.5e-3, {\"\xE2\x82\xAC\": null}], \"t\":\n  true}"},
      {json_schema_grammar(nlohmann::ordered_json::parse(kPerson)),
       R"({"name": "Al", "age": 42, "tags": [3, "b"]})"},
      {compile(R"({"type": "object", "properties": {"id": {"type": "string", "format": "uuid"},
           "at": {"type": "string", "format": "date-time"}, "n": {"type": "integer", "maximum": -3},
           "more": {"additionalProperties": {"type": "array", "prefixItems": [{"const": 1}]}}}})"),
       R"({"id": "0a1B2c3D-0000-4000-8000-00000000000f", "at": "2024-02-29T12:00:00Z",)"
       R"( "n": -40, "more": {"x": [1], "y": []}})"}};
  std::vector<uint8_t> allowed;
  for (const auto& [g, doc] : cases) {
    GrammarMatcher m(g);
    for (size_t i = 0; i <= doc.size(); ++i) {
      m.allowed_tokens(sample_trie, allowed);
      ASSERT_EQ(allowed, brute_force_allowed(m, sample)) << "after '" << doc.substr(0, i) << "'";
      if (i % 9 == 0) {
        m.allowed_tokens(llama2_trie(), allowed);
        ASSERT_EQ(allowed, brute_force_allowed(m, vocab)) << "after '" << doc.substr(0, i) << "'";
      }
      if (i < doc.size()) {
        ASSERT_TRUE(m.accept(doc.substr(i, 1)));
      }
    }
    EXPECT_TRUE(m.complete());
  }
}

TEST(JsonSchemaGrammar, RandomTokenWalksSatisfyTheSchema) {
  const json schemas[] = {
      json::parse(kPerson),
      json::parse(
          R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": ["integer", "null"]},
          "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}}, "required": ["v"]}},
          "$ref": "#/$defs/node"})"),
      json::parse(
          R"({"type": "object", "properties": {"when": {"type": "string", "format": "date-time"},
          "id": {"type": "string", "format": "uuid"}, "n": {"type": "integer", "minimum": -5, "maximum": 12},
          "pair": {"type": "array", "prefixItems": [{"type": "boolean"}, {"type": "number"}], "items": false, "minItems": 2},
          "pick": {"anyOf": [{"const": "x"}, {"type": "string", "minLength": 2, "maxLength": 3}]}},
          "required": ["when", "id", "n", "pair", "pick"], "additionalProperties": {"type": "null"}})"),
      json::parse(R"({"type": "object", "properties": {"s": {"type": "string", "maxLength": 8},
          "a": {"type": "array", "items": {"type": "integer"}, "maxItems": 4}}})"),
  };
  std::mt19937 rng(2024);
  int walks = 0;
  for (const json& schema : schemas) {
    auto g = json_schema_grammar(schema);
    for (int i = 0; i < 5; ++i) {
      testing::Walk w =
          testing::random_walk(g, llama2_trie(), testing::llama2_token_bytes(), rng, 300);
      if (!w.complete) continue;  // a long string ran past the token cap: nothing to check
      ++walks;
      json value;
      ASSERT_NO_THROW(value = json::parse(w.text)) << w.text;
      EXPECT_EQ(testing::validate(value, schema), "") << w.text;
    }
  }
  EXPECT_GE(walks, 16);
}

TEST(JsonObjectGrammar, RandomTokenWalksAreJsonObjects) {
  auto g = json_object_grammar();
  std::mt19937 rng(5);
  int walks = 0;
  for (int i = 0; i < 6; ++i) {
    testing::Walk w =
        testing::random_walk(g, llama2_trie(), testing::llama2_token_bytes(), rng, 200);
    if (!w.complete) continue;
    ++walks;
    json value;
    ASSERT_NO_THROW(value = json::parse(w.text)) << w.text;
    EXPECT_TRUE(value.is_object()) << w.text;
  }
  EXPECT_GE(walks, 2);
}

// Time per allowed_tokens call on the 32000-token vocabulary, at states with many and few
// allowed tokens (reported; the bound only catches a per-token re-match).
TEST(JsonSchemaGrammar, AllowedTokensIsFast) {
  auto g = json_schema_grammar(nlohmann::ordered_json::parse(kPerson));
  const std::string prefixes[] = {"", "{\"name\": \"A", "{\"name\":\"Al\",\"age\":4",
                                  "{\"name\":\"Al\",\"age\":4,"};
  std::vector<uint8_t> allowed;
  for (const std::string& p : prefixes) {
    GrammarMatcher m(g);
    ASSERT_TRUE(m.accept(p));
    const int reps = 20;
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) m.allowed_tokens(llama2_trie(), allowed);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
        reps;
    size_t n = 0;
    for (uint8_t a : allowed) n += a;
    std::printf("allowed_tokens after '%s': %.3f ms, %zu of %zu tokens allowed\n", p.c_str(), ms, n,
                allowed.size());
    EXPECT_LT(ms, 20.0) << p;
  }
}

}  // namespace
}  // namespace unillm::infer
