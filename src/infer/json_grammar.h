// JSON's own rules (RFC 8259) as grammar rules, and the typed pieces the schema compiler adds
// (bounded strings, string formats, integer ranges, keys that avoid a set of names).
//
// Conventions shared by every JSON grammar here:
// - Whitespace is `ws ::= "" | " " | "\n" [ \t]{0,20}`: bounded, so a model cannot loop on it.
//   It may follow "{", "[", ":" and ",", and each member key and value; never before the top
//   value nor after it (after the top value completes, nothing may follow: stop generation).
// - Strings are valid UTF-8 (spelt out byte by byte); escapes are \" \\ \/ \b \f \n \r \t and
//   \uXXXX, where a surrogate must come as a high-low pair (a lone one is not valid Unicode).
// - Numbers: at most 16 integer digits, 16 fraction digits, 3 exponent digits, so a number
//   cannot run on forever.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "infer/grammar.h"

namespace unillm::infer::json_grammar {

struct Rules {
  int32_t ws, chr, string, integer, number, boolean, null, object, array, value;
};

// Adds the rules of any JSON value to b.
Rules add_rules(GrammarBuilder& b);

// "\"" chr{min,max} "\"" (max < 0: unbounded): the length is in characters (code points).
int32_t add_string_of_length(GrammarBuilder& b, const Rules& r, int min, int max);

// A string of the JSON Schema format ("date", "time", "date-time", "uuid"), quotes included, or
// -1 for any other format.
int32_t add_format_string(GrammarBuilder& b, const std::string& format);

// Integers in [lo, hi] (a missing bound: unbounded) without leading zeros or "-0"; lo <= hi.
int32_t add_integer_range(GrammarBuilder& b, std::optional<int64_t> lo, std::optional<int64_t> hi);

// The quoted key of an extra object member: printable ASCII without escapes ("\"", "\\" and
// control bytes excluded, so no spelling can alias a declared name), never equal to any of
// `names`.
int32_t add_key_excluding(GrammarBuilder& b, const std::vector<std::string>& names);

}  // namespace unillm::infer::json_grammar
