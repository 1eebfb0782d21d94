// JSON Schema -> grammar: one rule per schema node, named by its JSON pointer (so errors and
// left-recursion reports can name the place); $ref targets are compiled once and may recurse.
#include "infer/json_schema.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <string_view>

#include "core/error.h"
#include "infer/json_grammar.h"

namespace unillm::infer {
namespace {

using bnf::bytes;
using bnf::lit;
using bnf::ref;
using bnf::seq;
using bnf::Symbol;
using bnf::Symbols;

using Json = nlohmann::ordered_json;

constexpr std::string_view kIgnored[] = {"title",    "description", "$schema",  "$id",
                                         "default",  "examples",    "$comment", "deprecated",
                                         "readOnly", "writeOnly",   "$defs",    "definitions"};
// Keywords that replace type-based compilation; each stands alone (beside annotations).
constexpr std::string_view kCombinators[] = {"$ref", "anyOf", "oneOf", "allOf", "enum", "const"};
constexpr std::string_view kTypes[] = {"string", "number", "integer", "boolean",
                                       "null",   "object", "array"};
// Keywords of one type: without "type", those present choose the types.
constexpr std::string_view kObjectWords[] = {"properties", "required", "additionalProperties"};
constexpr std::string_view kArrayWords[] = {"items", "prefixItems", "minItems", "maxItems"};
constexpr std::string_view kStringWords[] = {"minLength", "maxLength", "format"};
constexpr std::string_view kBoundWords[] = {"minimum", "maximum", "exclusiveMinimum",
                                            "exclusiveMaximum"};
constexpr int kMaxCount = 100000;  // largest min/max length or items: a bound costs ~1 rule each
constexpr double kMaxBound = 1e18;
// A schema comes from a request body: its grammar's size and nesting are capped so no request
// can make the server build an enormous grammar or recurse off the stack.
constexpr size_t kMaxRules = 250000;
constexpr int kMaxDepth = 64;

template <size_t N>
bool in(const std::string_view (&list)[N], std::string_view word) {
  return std::find(std::begin(list), std::end(list), word) != std::end(list);
}
bool supported(std::string_view word) {
  return word == "type" || in(kCombinators, word) || in(kObjectWords, word) ||
         in(kArrayWords, word) || in(kStringWords, word) || in(kBoundWords, word);
}

template <size_t N>
bool has_any(const Json& s, const std::string_view (&list)[N]) {
  return std::any_of(std::begin(list), std::end(list),
                     [&](std::string_view k) { return s.contains(std::string(k)); });
}

std::string child(const std::string& path, const std::string& key) {
  std::string k;
  for (char c : key) k += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
  return path + "/" + k;
}

std::string where(const std::string& path) { return path.empty() ? "/" : path; }

template <typename... Parts>
[[noreturn]] void fail(const std::string& path, const Parts&... message) {
  UNILLM_THROW(ConfigError, "[json_schema] ", where(path), ": ", message...);
}

bool has_type(const Json& v, std::string_view type) {
  if (type == "string") return v.is_string();
  if (type == "number") return v.is_number();
  if (type == "integer")
    return v.is_number_integer() ||
           (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
  if (type == "boolean") return v.is_boolean();
  if (type == "null") return v.is_null();
  if (type == "object") return v.is_object();
  return v.is_array();
}

class Compiler {
 public:
  explicit Compiler(const Json& root)
      : root_(&root), json_(json_grammar::add_rules(b_)), ws_(ref(json_.ws)) {}

  std::shared_ptr<const Grammar> build() { return finish(compile(*root_, "")); }

  // One rule of alternatives prefix + value + suffix; each schema is its own $ref document.
  std::shared_ptr<const Grammar> build(const std::vector<JsonInText>& alternatives) {
    std::vector<Symbols> alts;
    for (const JsonInText& a : alternatives) {
      root_ = &a.schema;
      refs_.clear();
      const int32_t value = compile(a.schema, "");
      alts.push_back(seq(std::string_view(a.prefix), ref(value), std::string_view(a.suffix)));
    }
    return finish(b_.add("text", std::move(alts)));
  }

 private:
  std::shared_ptr<const Grammar> finish(int32_t top) {
    if (b_.num_rules() > kMaxRules)
      fail("", "the schema needs more than ", kMaxRules, " grammar rules (lower its maxLength/maxItems bounds)");
    const std::string cycle = b_.left_recursion();
    if (!cycle.empty())
      fail(cycle.substr(0, cycle.find(" -> ")),
           "the schema refers to itself before any text (left recursion: " + cycle + ")");
    return b_.build(top);
  }

  int32_t compile(const Json& s, const std::string& path);
  int32_t compile_combinator(const Json& s, const std::string& word, const std::string& path);
  int32_t compile_ref(const Json& s, const std::string& path);
  int32_t compile_enum(const Json& s, const std::string& word, const std::string& path);
  std::vector<std::string> types_of(const Json& s, const std::string& path);
  int32_t compile_type(const Json& s, const std::string& type, const std::string& path);
  int32_t compile_string(const Json& s, const std::string& path);
  int32_t compile_integer(const Json& s, const std::string& path);
  int32_t compile_object(const Json& s, const std::string& path);
  int32_t object_members(const std::vector<int32_t>& members, const std::vector<bool>& required,
                         int32_t extra, const std::string& path);
  int32_t compile_array(const Json& s, const std::string& path);
  std::optional<int> count(const Json& s, const char* word, const std::string& path);

  const Json* root_;
  GrammarBuilder b_;
  json_grammar::Rules json_;
  Symbol ws_;
  std::map<std::string, int32_t> refs_;  // JSON pointer -> rule of its schema
  int depth_ = 0;  // compile() calls in progress
};

int32_t Compiler::compile(const Json& s, const std::string& path) {
  if (b_.num_rules() > kMaxRules)
    fail(path, "the schema needs more than ", kMaxRules, " grammar rules (lower its maxLength/maxItems bounds)");
  struct Depth {
    int& d;
    explicit Depth(int& d) : d(++d) {}
    ~Depth() { --d; }
  } depth(depth_);
  if (depth_ > kMaxDepth) fail(path, "the schema nests deeper than ", kMaxDepth, " levels");
  if (s.is_boolean()) {
    if (!s.get<bool>()) fail(path, "the schema false matches nothing");
    return json_.value;
  }
  if (!s.is_object()) fail(path, "a schema must be an object or a boolean");
  std::string combinator;
  for (const auto& [word, value] : s.items()) {
    if (!in(kIgnored, word) && !supported(word))
      fail(path, "keyword '" + word + "' is not supported");
    if (!in(kCombinators, word)) continue;
    if (!combinator.empty())
      fail(path, "keywords '", combinator, "' and '", word, "' cannot be combined");
    combinator = word;
  }
  if (!combinator.empty()) {
    // Other assertions beside a combinator would intersect with it: not supported (type may
    // filter an enum).
    const bool literal = combinator == "enum" || combinator == "const";
    for (const auto& [word, value] : s.items()) {
      if (word != combinator && !in(kIgnored, word) && !(literal && word == "type"))
        fail(path, "keyword '", word, "' cannot be combined with '", combinator, "'");
    }
    return compile_combinator(s, combinator, path);
  }
  const std::vector<std::string> types = types_of(s, path);
  if (types.empty()) return json_.value;
  std::vector<Symbols> alts;
  alts.reserve(types.size());
  for (const std::string& t : types) alts.push_back({ref(compile_type(s, t, path))});
  return alts.size() == 1 ? alts[0][0].rule : b_.add(where(path), alts);
}

int32_t Compiler::compile_combinator(const Json& s, const std::string& word,
                                     const std::string& path) {
  if (word == "$ref") return compile_ref(s, path);
  if (word == "enum" || word == "const") return compile_enum(s, word, path);
  const Json& list = s[word];
  if (!list.is_array() || list.empty())
    fail(path, "'" + word + "' must be a non-empty array of schemas");
  const std::string at = child(path, word);
  if (word == "allOf") {
    if (list.size() != 1) fail(path, "'allOf' with more than one schema is not supported");
    return compile(list[0], child(at, "0"));
  }
  std::vector<Symbols> alts;  // anyOf, and oneOf as anyOf
  for (size_t i = 0; i < list.size(); ++i)
    alts.push_back({ref(compile(list[i], child(at, std::to_string(i))))});
  return b_.add(where(at), alts);
}

int32_t Compiler::compile_ref(const Json& s, const std::string& path) {
  const Json& r = s["$ref"];
  if (!r.is_string()) fail(path, "'$ref' must be a string");
  const std::string target = r.get<std::string>();
  if (target.empty() || target[0] != '#')
    fail(path,
         "$ref '" + target + "' is not supported: only references inside the schema ('#/...')");
  const std::string pointer = target.substr(1);
  if (auto it = refs_.find(pointer); it != refs_.end()) return it->second;
  bool found = false;
  Json::json_pointer ptr;
  try {
    ptr = Json::json_pointer(pointer);
    found = root_->contains(ptr);
  } catch (const nlohmann::json::exception&) {
  }
  if (!found) fail(path, "$ref '" + target + "' does not resolve to a schema in this document");
  // Declared before compiling the target, so a recursive reference finds it.
  const int32_t rule = b_.declare(where(pointer));
  refs_[pointer] = rule;
  b_.define(rule, {{ref(compile(root_->at(ptr), pointer))}});
  return rule;
}

int32_t Compiler::compile_enum(const Json& s, const std::string& word, const std::string& path) {
  std::vector<Json> values;
  if (word == "const") {
    values.push_back(s["const"]);
  } else {
    if (!s["enum"].is_array() || s["enum"].empty()) fail(path, "'enum' must be a non-empty array");
    values.assign(s["enum"].begin(), s["enum"].end());
  }
  std::vector<std::string> types =
      s.contains("type") ? types_of(s, path) : std::vector<std::string>{};
  std::vector<Symbols> alts;
  for (const Json& v : values) {
    bool typed = types.empty() || std::any_of(types.begin(), types.end(),
                                              [&](const std::string& t) { return has_type(v, t); });
    // Compact text, UTF-8 as is: the one spelling the model may write.
    if (typed)
      alts.push_back(lit(v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)));
  }
  if (alts.empty()) fail(path, "no value of '" + word + "' has the type given by 'type'");
  return b_.add(where(child(path, word)), alts);
}

std::vector<std::string> Compiler::types_of(const Json& s, const std::string& path) {
  std::vector<std::string> types;
  if (!s.contains("type")) {  // chosen by the type keywords present (a narrower, sound grammar)
    if (has_any(s, kObjectWords)) types.push_back("object");
    if (has_any(s, kArrayWords)) types.push_back("array");
    if (has_any(s, kStringWords)) types.push_back("string");
    if (has_any(s, kBoundWords)) types.push_back("number");
    return types;
  }
  const Json& t = s["type"];
  if (t.is_string()) {
    types.push_back(t.get<std::string>());
  } else if (t.is_array() && !t.empty() &&
             std::all_of(t.begin(), t.end(), [](const Json& x) { return x.is_string(); })) {
    for (const Json& x : t) types.push_back(x.get<std::string>());
  } else {
    fail(path, "'type' must be a type name or a non-empty list of them");
  }
  for (const std::string& name : types) {
    if (!in(kTypes, name)) fail(path, "unknown type '" + name + "'");
  }
  return types;
}

int32_t Compiler::compile_type(const Json& s, const std::string& type, const std::string& path) {
  if (type == "string") return compile_string(s, path);
  if (type == "integer") return compile_integer(s, path);
  if (type == "number") {
    for (std::string_view w : kBoundWords) {
      if (s.contains(std::string(w)))
        fail(path, "keyword '" + std::string(w) + "' is supported only for type 'integer'");
    }
    return json_.number;
  }
  if (type == "boolean") return json_.boolean;
  if (type == "null") return json_.null;
  if (type == "object") return compile_object(s, path);
  return compile_array(s, path);
}

std::optional<int> Compiler::count(const Json& s, const char* word, const std::string& path) {
  if (!s.contains(word)) return std::nullopt;
  const Json& v = s[word];
  if (!v.is_number() || v.get<double>() < 0 || std::floor(v.get<double>()) != v.get<double>())
    fail(path, std::string("'") + word + "' must be a non-negative integer");
  if (v.get<double>() > kMaxCount)
    fail(path,
         std::string("'") + word + "' above " + std::to_string(kMaxCount) + " is not supported");
  return static_cast<int>(v.get<double>());
}

int32_t Compiler::compile_string(const Json& s, const std::string& path) {
  const std::optional<int> min = count(s, "minLength", path), max = count(s, "maxLength", path);
  if (s.contains("format")) {
    if (!s["format"].is_string()) fail(path, "'format' must be a string");
    if (min || max) fail(path, "'format' cannot be combined with 'minLength' or 'maxLength'");
    const std::string format = s["format"].get<std::string>();
    const int32_t rule = json_grammar::add_format_string(b_, format);
    if (rule < 0)
      fail(path,
           "format '" + format + "' is not supported (supported: date, time, date-time, uuid)");
    return rule;
  }
  if (!min && !max) return json_.string;
  if (min && max && *min > *max) fail(path, "'minLength' is greater than 'maxLength'");
  return json_grammar::add_string_of_length(b_, json_, min.value_or(0), max.value_or(-1));
}

int32_t Compiler::compile_integer(const Json& s, const std::string& path) {
  std::optional<int64_t> lo, hi;
  for (std::string_view w : kBoundWords) {
    const std::string word(w);
    if (!s.contains(word)) continue;
    const Json& v = s[word];
    if (!v.is_number()) fail(path, "'" + word + "' must be a number");
    const double x = v.get<double>();
    if (!(std::fabs(x) <= kMaxBound)) fail(path, "'" + word + "' beyond 1e18 is not supported");
    const bool exclusive = word.rfind("exclusive", 0) == 0;
    if (word == "minimum" || word == "exclusiveMinimum") {
      const auto b = static_cast<int64_t>(exclusive ? std::floor(x) + 1 : std::ceil(x));
      lo = lo ? std::max(*lo, b) : b;
    } else {
      const auto b = static_cast<int64_t>(exclusive ? std::ceil(x) - 1 : std::floor(x));
      hi = hi ? std::min(*hi, b) : b;
    }
  }
  if (!lo && !hi) return json_.integer;
  if (lo && hi && *lo > *hi) fail(path, "no integer lies within the bounds");
  return json_grammar::add_integer_range(b_, lo, hi);
}

int32_t Compiler::compile_object(const Json& s, const std::string& path) {
  const Json none = Json::object();
  const Json& props = s.contains("properties") ? s["properties"] : none;
  if (!props.is_object()) fail(path, "'properties' must be an object");
  const Json& addl = s.contains("additionalProperties") ? s["additionalProperties"] : Json(nullptr);
  if (!addl.is_null() && !addl.is_boolean() && !addl.is_object())
    fail(path, "'additionalProperties' must be a boolean or a schema");
  std::vector<std::string> names;
  for (const auto& [name, schema] : props.items()) names.push_back(name);
  std::vector<bool> required(names.size(), false);
  if (s.contains("required")) {
    const Json& req = s["required"];
    if (!req.is_array()) fail(path, "'required' must be an array of property names");
    for (const Json& r : req) {
      if (!r.is_string()) fail(path, "'required' must be an array of property names");
      auto it = std::find(names.begin(), names.end(), r.get<std::string>());
      if (it == names.end())
        fail(path, "required property '" + r.get<std::string>() + "' is not in 'properties'");
      required[it - names.begin()] = true;
    }
  }
  // Nothing declared and nothing said about other members: any object.
  if (props.empty() && addl.is_null()) return json_.object;

  std::vector<int32_t> members;
  for (const auto& [name, schema] : props.items()) {
    const std::string at = child(child(path, "properties"), name);
    const int32_t value = compile(schema, at);
    const std::string key =
        Json(name).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    members.push_back(b_.add(at, {seq(lit(key), ws_, ":", ws_, ref(value), ws_)}));
  }
  int32_t extra = -1;  // the rule of one extra member
  if (addl.is_object() || (addl.is_boolean() && addl.get<bool>())) {
    const std::string at = child(path, "additionalProperties");
    const int32_t value = addl.is_object() ? compile(addl, at) : json_.value;
    const int32_t key = names.empty() ? json_.string : json_grammar::add_key_excluding(b_, names);
    extra = b_.add(at, {seq(ref(key), ws_, ":", ws_, ref(value), ws_)});
  }
  return object_members(members, required, extra, path);
}

// "{" ws tail(0, first) "}", where tail(i, first) spells members i.. in order (optional ones may
// be left out; `first`: none written yet, so no comma), then the extra members.
int32_t Compiler::object_members(const std::vector<int32_t>& members,
                                 const std::vector<bool>& required, int32_t extra,
                                 const std::string& path) {
  const size_t n = members.size();
  const std::string name = where(path) + "{}";
  std::vector<std::array<int32_t, 2>> tail(n + 1);  // [i][first]
  if (extra >= 0) {
    const int32_t more = b_.repeat(name + "-extra", seq(",", ws_, ref(extra)), 0, -1);
    tail[n][0] = b_.add(name, {{ref(more)}});
    tail[n][1] = b_.add(name, {seq(ref(extra), ref(more)), {}});
  } else {
    tail[n][0] = tail[n][1] = b_.add(name, {{}});
  }
  for (size_t i = n; i-- > 0;) {
    for (int first = 0; first < 2; ++first) {
      Symbols sep = first ? Symbols{} : seq(",", ws_);
      std::vector<Symbols> alts{seq(sep, ref(members[i]), ref(tail[i + 1][0]))};
      if (!required[i]) alts.push_back({ref(tail[i + 1][first])});
      tail[i][first] = b_.add(name, alts);
    }
  }
  return b_.add(where(path), {seq("{", ws_, ref(tail[0][1]), "}")});
}

int32_t Compiler::compile_array(const Json& s, const std::string& path) {
  std::vector<int32_t> prefix;  // element rules: a value, then ws
  if (s.contains("prefixItems")) {
    const Json& p = s["prefixItems"];
    if (!p.is_array()) fail(path, "'prefixItems' must be an array of schemas");
    for (size_t i = 0; i < p.size(); ++i) {
      const std::string at = child(child(path, "prefixItems"), std::to_string(i));
      prefix.push_back(b_.add(at, {seq(ref(compile(p[i], at)), ws_)}));
    }
  }
  const size_t k = prefix.size();
  int32_t item = -1;  // the element rule past the prefix; -1: no more elements
  const Json& items = s.contains("items") ? s["items"] : Json(true);
  if (items.is_array())
    fail(path, "the array form of 'items' is not supported (use 'prefixItems')");
  if (!items.is_boolean() || items.get<bool>()) {
    const std::string at = child(path, "items");
    item = b_.add(at, {seq(ref(compile(items, at)), ws_)});
  }
  const int min = count(s, "minItems", path).value_or(0);
  int max = count(s, "maxItems", path).value_or(-1);
  if (item < 0) max = max < 0 ? static_cast<int>(k) : std::min(max, static_cast<int>(k));
  if (max >= 0 && min > max) fail(path, "'minItems' is more than the array may hold");

  auto element = [&](size_t j) { return j < k ? prefix[j] : item; };
  auto sep = [&](size_t j) { return j == 0 ? Symbols{} : seq(",", ws_); };
  const std::string name = where(path) + "[]";
  // at[j]: the rest of the array after j elements. Bounded: a chain to max. Unbounded: from
  // J = max(k, min) on, any number of `item`s.
  const size_t last = max >= 0 ? static_cast<size_t>(max) : std::max(k, static_cast<size_t>(min));
  std::vector<int32_t> at(last + 1);
  if (max >= 0) {
    at[last] = b_.add(name, {{}});
  } else {
    const int32_t more = b_.repeat(name + "-more", seq(",", ws_, ref(item)), 0, -1);
    at[last] = last == 0 ? b_.add(name, {seq(ref(item), ref(more)), {}}) : more;
  }
  for (size_t j = last; j-- > 0;) {
    std::vector<Symbols> alts{seq(sep(j), ref(element(j)), ref(at[j + 1]))};
    if (static_cast<int>(j) >= min) alts.push_back({});
    at[j] = b_.add(name, alts);
  }
  return b_.add(where(path), {seq("[", ws_, ref(at[0]), "]")});
}

}  // namespace

std::shared_ptr<const Grammar> json_object_grammar() {
  GrammarBuilder b;
  const json_grammar::Rules r = json_grammar::add_rules(b);
  return b.build(r.object);
}

std::shared_ptr<const Grammar> json_schema_grammar(const nlohmann::ordered_json& schema) {
  return Compiler(schema).build();
}

std::shared_ptr<const Grammar> json_in_text_grammar(const std::vector<JsonInText>& alternatives) {
  if (alternatives.empty()) fail("", "json_in_text_grammar needs at least one alternative");
  static const Json kEmpty = Json::object();
  return Compiler(kEmpty).build(alternatives);
}

std::shared_ptr<const Grammar> json_schema_grammar(const nlohmann::json& schema) {
  return json_schema_grammar(nlohmann::ordered_json(schema));
}

}  // namespace unillm::infer
