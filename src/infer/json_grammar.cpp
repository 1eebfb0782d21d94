// JSON's rules and the typed pieces of JSON Schema grammars; see json_grammar.h for the
// conventions (whitespace, strings, number lengths).
#include "infer/json_grammar.h"

#include <algorithm>
#include <string_view>

namespace unillm::infer::json_grammar {

using bnf::bytes;
using bnf::lit;
using bnf::ref;
using bnf::seq;
using bnf::Symbol;
using bnf::Symbols;
namespace {

Symbol set(std::string_view spec) { return bytes(ByteSet::chars(spec)); }
Symbol range(uint8_t lo, uint8_t hi) { return bytes(ByteSet::range(lo, hi)); }

Symbols times(const Symbol& s, size_t n) { return Symbols(n, s); }

// One string character: printable ASCII but '"' and '\', a well-formed UTF-8 sequence (no
// overlongs, no surrogates, <= U+10FFFF), or an escape.
int32_t add_char(GrammarBuilder& b) {
  const Symbol hex = set("0-9a-fA-F");
  const int32_t u4 = b.add(
      "u4", {seq(set("0-9a-cA-CefEF"), hex, hex, hex), seq(set("dD"), set("0-7"), hex, hex),
             // a high surrogate, then its low one
             seq(set("dD"), set("89abAB"), hex, hex, "\\u", set("dD"), set("c-fC-F"), hex, hex)});
  const int32_t escape = b.add("escape", {seq("\\", set("\"\\/bfnrt")), seq("\\u", ref(u4))});
  const Symbol cont = range(0x80, 0xBF);
  ByteSet ascii = ByteSet::range(0x20, 0x7F).remove('"').remove('\\');
  return b.add("char", {{bytes(ascii)},
                        seq(range(0xC2, 0xDF), cont),
                        seq(range(0xE0, 0xE0), range(0xA0, 0xBF), cont),
                        seq(bytes(ByteSet::range(0xE1, 0xEC).add(0xEE, 0xEF)), cont, cont),
                        seq(range(0xED, 0xED), range(0x80, 0x9F), cont),
                        seq(range(0xF0, 0xF0), range(0x90, 0xBF), cont, cont),
                        seq(range(0xF1, 0xF3), cont, cont, cont),
                        seq(range(0xF4, 0xF4), range(0x80, 0x8F), cont, cont),
                        {ref(escape)}});
}

void add_numbers(GrammarBuilder& b, Rules& r) {
  const Symbol digit = range('0', '9');
  const int32_t more = b.repeat("digits", {digit}, 0, 15);
  const int32_t natural = b.add("natural", {lit("0"), seq(range('1', '9'), ref(more))});
  r.integer = b.add("integer", {{ref(natural)}, seq("-", ref(natural))});
  const int32_t frac_digits = b.repeat("fraction", {digit}, 1, 16);
  const int32_t exp_digits = b.repeat("exponent", {digit}, 1, 3);
  const int32_t frac = b.add("frac?", {{}, seq(".", ref(frac_digits))});
  const int32_t exp = b.add(
      "exp?", {{}, seq(set("eE"), ref(exp_digits)), seq(set("eE"), set("+-"), ref(exp_digits))});
  r.number = b.add("number", {seq(ref(r.integer), ref(frac), ref(exp))});
}

}  // namespace

Rules add_rules(GrammarBuilder& b) {
  Rules r{};
  const int32_t indent = b.repeat("indent", {set(" \t")}, 0, 20);
  r.ws = b.add("ws", {{}, lit(" "), seq("\n", ref(indent))});
  r.chr = add_char(b);
  const int32_t chars = b.repeat("chars", {ref(r.chr)}, 0, -1);
  r.string = b.add("string", {seq("\"", ref(chars), "\"")});
  add_numbers(b, r);
  r.boolean = b.add("boolean", {lit("true"), lit("false")});
  r.null = b.add("null", {lit("null")});
  r.value = b.declare("value");
  const int32_t member =
      b.add("member", {seq(ref(r.string), ref(r.ws), ":", ref(r.ws), ref(r.value), ref(r.ws))});
  const int32_t members = b.repeat("members", seq(",", ref(r.ws), ref(member)), 0, -1);
  r.object = b.add("object",
                   {seq("{", ref(r.ws), "}"), seq("{", ref(r.ws), ref(member), ref(members), "}")});
  const int32_t element = b.add("element", {seq(ref(r.value), ref(r.ws))});
  const int32_t elements = b.repeat("elements", seq(",", ref(r.ws), ref(element)), 0, -1);
  r.array = b.add(
      "array", {seq("[", ref(r.ws), "]"), seq("[", ref(r.ws), ref(element), ref(elements), "]")});
  b.define(r.value, {{ref(r.object)},
                     {ref(r.array)},
                     {ref(r.string)},
                     {ref(r.number)},
                     {ref(r.boolean)},
                     {ref(r.null)}});
  return r;
}

int32_t add_string_of_length(GrammarBuilder& b, const Rules& r, int min, int max) {
  std::string name =
      "string{" + std::to_string(min) + "," + (max < 0 ? "" : std::to_string(max)) + "}";
  const int32_t chars = b.repeat(name + "-chars", {ref(r.chr)}, min, max);
  return b.add(name, {seq("\"", ref(chars), "\"")});
}

namespace {

// RFC 3339 full-date, day counts and leap years included.
int32_t add_date(GrammarBuilder& b) {
  const Symbol d = range('0', '9');
  const Symbols year = times(d, 4);
  const Symbols from_01 = seq("0", range('1', '9'));
  const int32_t day31 = b.add("day31", {from_01, seq(set("12"), d), seq("3", set("01"))});
  const int32_t day30 = b.add("day30", {from_01, seq(set("12"), d), lit("30")});
  const int32_t day28 = b.add("day28", {from_01, seq("1", d), seq("2", set("0-8"))});
  // Divisible by 4 and not by 100, or by 400.
  const Symbols by4 = seq(set("02468"), set("048"));
  const int32_t leap =
      b.add("leap-year", {seq(d, d, "0", set("48")), seq(d, d, set("2468"), set("048")),
                          seq(d, d, set("13579"), set("26")), seq(by4, "00"),
                          seq(set("13579"), set("26"), "00")});
  return b.add("date", {seq(year, "-0", set("13578"), "-", ref(day31)),
                        seq(year, "-1", set("02"), "-", ref(day31)),
                        seq(year, "-0", set("469"), "-", ref(day30)), seq(year, "-11-", ref(day30)),
                        seq(year, "-02-", ref(day28)), seq(ref(leap), "-02-29")});
}

// RFC 3339 full-time (no leap second): hh:mm:ss, optional fraction, Z or an offset.
int32_t add_time(GrammarBuilder& b) {
  const Symbol d = range('0', '9');
  const int32_t hour = b.add("hour", {seq(set("01"), d), seq("2", set("0-3"))});
  const Symbols minute = seq(set("0-5"), d);
  const int32_t frac =
      b.add("time-fraction", {{}, seq(".", ref(b.repeat("time-digits", {d}, 1, 9)))});
  const int32_t offset = b.add("offset", {lit("Z"), seq(set("+-"), ref(hour), ":", minute)});
  return b.add("time", {seq(ref(hour), ":", minute, ":", minute, ref(frac), ref(offset))});
}

}  // namespace

int32_t add_format_string(GrammarBuilder& b, const std::string& format) {
  Symbols body;
  if (format == "date") {
    body = {ref(add_date(b))};
  } else if (format == "time") {
    body = {ref(add_time(b))};
  } else if (format == "date-time") {
    body = seq(ref(add_date(b)), "T", ref(add_time(b)));
  } else if (format == "uuid") {
    const Symbol h = set("0-9a-fA-F");
    body =
        seq(times(h, 8), "-", times(h, 4), "-", times(h, 4), "-", times(h, 4), "-", times(h, 12));
  } else {
    return -1;
  }
  return b.add("format-" + format, {seq("\"", body, "\"")});
}

namespace {

bool all_are(std::string_view s, char c) {
  return std::all_of(s.begin(), s.end(), [c](char x) { return x == c; });
}

// Alternatives spelling the digit strings from lo to hi (equal lengths, lo <= hi), each after
// `prefix`.
void same_length_range(std::string_view lo, std::string_view hi, const Symbols& prefix,
                       std::vector<Symbols>& alts) {
  const Symbol d = range('0', '9');
  const size_t rest = lo.size() - 1;
  if (lo.empty()) {
    alts.push_back(prefix);
  } else if (all_are(lo.substr(1), '0') && all_are(hi.substr(1), '9')) {
    alts.push_back(seq(prefix, range(lo[0], hi[0]), times(d, rest)));
  } else if (lo[0] == hi[0]) {
    same_length_range(lo.substr(1), hi.substr(1), seq(prefix, lit(lo.substr(0, 1))), alts);
  } else {
    same_length_range(lo.substr(1), std::string(rest, '9'), seq(prefix, lit(lo.substr(0, 1))),
                      alts);
    if (hi[0] - lo[0] >= 2)
      alts.push_back(seq(prefix, range(lo[0] + 1, hi[0] - 1), times(d, rest)));
    same_length_range(std::string(rest, '0'), hi.substr(1), seq(prefix, lit(hi.substr(0, 1))),
                      alts);
  }
}

// Naturals from lo to hi (none: unbounded, up to 16 digits or lo's length) without leading zeros.
void natural_range(uint64_t lo, std::optional<uint64_t> hi, const Symbols& prefix,
                   std::vector<Symbols>& alts) {
  const std::string slo = std::to_string(lo);
  const std::string shi = hi ? std::to_string(*hi) : "";
  const size_t max_len = hi ? shi.size() : std::max<size_t>(slo.size(), 16);
  for (size_t len = slo.size(); len <= max_len; ++len) {
    std::string from = len == slo.size() ? slo : "1" + std::string(len - 1, '0');
    std::string to = hi && len == shi.size() ? shi : std::string(len, '9');
    same_length_range(from, to, prefix, alts);
  }
}

uint64_t magnitude(int64_t v) { return v < 0 ? uint64_t(-(v + 1)) + 1 : uint64_t(v); }

}  // namespace

int32_t add_integer_range(GrammarBuilder& b, std::optional<int64_t> lo, std::optional<int64_t> hi) {
  std::vector<Symbols> alts;
  if (!hi || *hi >= 0) {
    natural_range(lo && *lo > 0 ? uint64_t(*lo) : 0,
                  hi ? std::optional<uint64_t>(*hi) : std::nullopt, {}, alts);
  }
  if (!lo || *lo < 0) {  // negatives: "-" and a magnitude from max(1, -hi) to -lo
    uint64_t from = hi && *hi < 0 ? magnitude(*hi) : 1;
    natural_range(from, lo ? std::optional<uint64_t>(magnitude(*lo)) : std::nullopt, lit("-"),
                  alts);
  }
  std::string name =
      "integer[" + (lo ? std::to_string(*lo) : "") + "," + (hi ? std::to_string(*hi) : "") + "]";
  return b.add(name, alts);
}

namespace {

// After the key's bytes so far equal the common prefix (length depth) of `names` (sorted): the
// rest of the key, closing quote included.
int32_t key_rest(GrammarBuilder& b, const std::vector<std::string>& names, size_t depth,
                 const ByteSet& key_chars, int32_t any_rest) {
  std::vector<Symbols> alts;
  ByteSet free = key_chars;
  bool is_name = false;
  for (size_t i = 0; i < names.size();) {
    if (names[i].size() == depth) {
      is_name = true;
      ++i;
      continue;
    }
    const char c = names[i][depth];
    std::vector<std::string> group;
    for (; i < names.size() && names[i].size() > depth && names[i][depth] == c; ++i)
      group.push_back(names[i]);
    free.remove(static_cast<uint8_t>(c));
    alts.push_back(
        seq(lit(std::string(1, c)), ref(key_rest(b, group, depth + 1, key_chars, any_rest))));
  }
  if (!is_name) alts.push_back(lit("\""));
  if (!free.empty()) alts.push_back(seq(bytes(free), ref(any_rest)));  // diverged from every name
  return b.add("key-rest", alts);
}

}  // namespace

int32_t add_key_excluding(GrammarBuilder& b, const std::vector<std::string>& names) {
  const ByteSet key_chars = ByteSet::range(0x20, 0x7E).remove('"').remove('\\');
  std::vector<std::string> clash;  // names a key of key_chars could equal
  for (const std::string& n : names) {
    if (std::all_of(n.begin(), n.end(),
                    [&](char c) { return key_chars.has(static_cast<uint8_t>(c)); }))
      clash.push_back(n);
  }
  std::sort(clash.begin(), clash.end());
  clash.erase(std::unique(clash.begin(), clash.end()), clash.end());
  const int32_t any_chars = b.repeat("key-chars", {bytes(key_chars)}, 0, -1);
  const int32_t any_rest = b.add("key-tail", {seq(ref(any_chars), "\"")});
  return b.add("extra-key", {seq("\"", ref(key_rest(b, clash, 0, key_chars, any_rest)))});
}

}  // namespace unillm::infer::json_grammar
