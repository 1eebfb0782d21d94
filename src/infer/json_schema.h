// Grammars for OpenAI's response_format: {"type": "json_object"} and {"type": "json_schema"}.
// Whitespace, string and number conventions are json_grammar.h's: bounded whitespace between
// tokens, none before or after the top value.
//
// json_schema_grammar() compiles a subset of JSON Schema (2020-12 spelling) into a grammar whose
// every sentence satisfies the schema (where the grammar is narrower than the schema, it is said
// below). Supported:
// - type: string, number, integer, boolean, null, object, array, or a list of them (each branch
//   takes the keywords of its type). Without type, the type keywords present choose the types
//   (properties -> object, items -> array, minLength -> string, ...); none: any JSON value.
// - object: properties (emitted in declared order; required ones mandatory, the others may be
//   left out), required (each must be in properties), additionalProperties. Absent or false: no
//   other members (as OpenAI's strict mode) — except an object schema that declares no
//   properties, which accepts any object. true or a schema: extra members may follow the
//   declared ones; their keys are printable ASCII without escapes and never a declared name.
// - array: items (a schema or boolean), prefixItems, minItems, maxItems.
// - string: minLength, maxLength (characters), format: date, time, date-time (RFC 3339 with an
//   upper-case T and Z, no leap second), uuid. Counts (lengths, items) up to 100000.
// - integer: minimum, maximum, exclusiveMinimum, exclusiveMaximum (numbers, |bound| <= 1e18).
// - enum, const (matched as their compact JSON text; type may stand beside them and filters
//   enum), anyOf, oneOf (as anyOf: exclusivity is not enforced), allOf with one schema, $ref to
//   a JSON pointer in the same document ("#", "#/$defs/x", "#/definitions/x"; recursion works
//   when some text comes before the schema refers to itself).
// - Ignored annotations: title, description, $schema, $id, default, examples, $comment,
//   deprecated, readOnly, writeOnly; $defs and definitions are read only through $ref.
// Anything else (pattern, multipleOf, number bounds, other formats, uniqueItems, not, if, ...)
// throws ConfigError naming the JSON pointer and keyword:
//   "[json_schema] /properties/age: keyword 'pattern' is not supported".
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "infer/grammar.h"

namespace unillm::infer {

// Any JSON object (RFC 8259), the whole output.
std::shared_ptr<const Grammar> json_object_grammar();

// A JSON value satisfying `schema`; throws ConfigError for what is not supported. Properties
// come in the order the schema object holds them: parse the schema into an ordered_json to keep
// the declared order (nlohmann::json sorts object keys; that overload emits them sorted).
std::shared_ptr<const Grammar> json_schema_grammar(const nlohmann::ordered_json& schema);
std::shared_ptr<const Grammar> json_schema_grammar(const nlohmann::json& schema);

// Text around a JSON value: prefix, then a value satisfying schema, then suffix (a forced tool
// call: "<tool_call>\n" + {"name": ..., "arguments": ...} + "\n</tool_call>"). $ref pointers
// resolve within each alternative's own schema.
struct JsonInText {
  std::string prefix;
  nlohmann::ordered_json schema;
  std::string suffix;
};
// One of the alternatives (at least one); throws ConfigError as json_schema_grammar.
std::shared_ptr<const Grammar> json_in_text_grammar(const std::vector<JsonInText>& alternatives);

}  // namespace unillm::infer
