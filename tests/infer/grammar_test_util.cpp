// Shared helpers of the grammar tests (see grammar_test_util.h).
#include "grammar_test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <regex>

#include "io/tokenizer.h"
#include "support/expect.h"

namespace unillm::infer::testing {

const std::vector<std::string>& llama2_token_bytes() {
  static const std::vector<std::string> vocab = [] {
    auto tok = io::Tokenizer::load(unillm::testing::source_path("tests/data/llama2-tokenizer"));
    std::vector<std::string> out(tok->vocab_size());
    for (int32_t id = 0; id < tok->vocab_size(); ++id) {
      if (tok->is_special(id)) continue;
      const std::string t = tok->id_to_token(id);
      if (t.size() == 6 && t.rfind("<0x", 0) == 0 && t.back() == '>') {
        out[id] = std::string(1, static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16)));
        continue;
      }
      for (size_t i = 0; i < t.size();) {
        if (t.compare(i, 3, "\xE2\x96\x81") == 0) {  // U+2581 '▁'
          out[id] += ' ';
          i += 3;
        } else {
          out[id] += t[i++];
        }
      }
    }
    return out;
  }();
  return vocab;
}

std::vector<uint8_t> brute_force_allowed(const GrammarMatcher& m,
                                         const std::vector<std::string>& vocab) {
  std::vector<uint8_t> allowed(vocab.size(), 0);
  for (size_t i = 0; i < vocab.size(); ++i) {
    if (vocab[i].empty()) continue;
    GrammarMatcher copy = m;
    allowed[i] = copy.accept(vocab[i]) ? 1 : 0;
  }
  return allowed;
}

int reject_at(const std::shared_ptr<const Grammar>& g, std::string_view text, bool* complete) {
  GrammarMatcher m(g);
  for (size_t i = 0; i < text.size(); ++i) {
    if (!m.accept(text.substr(i, 1))) return static_cast<int>(i);
  }
  if (complete) *complete = m.complete();
  return -1;
}

Walk random_walk(const std::shared_ptr<const Grammar>& g, const TokenTrie& trie,
                 const std::vector<std::string>& vocab, std::mt19937& rng, int max_tokens) {
  GrammarMatcher m(g);
  Walk w;
  std::vector<uint8_t> allowed;
  std::vector<int32_t> ids;
  for (int step = 0; step < max_tokens; ++step) {
    if (m.complete() && (!m.can_continue() || rng() % 2 == 0)) break;
    m.allowed_tokens(trie, allowed);
    ids.clear();
    for (size_t i = 0; i < allowed.size(); ++i) {
      if (allowed[i]) ids.push_back(static_cast<int32_t>(i));
    }
    if (ids.empty()) {
      ADD_FAILURE() << "no token allowed after '" << w.text << "' (complete " << m.complete()
                    << ")";
      return w;
    }
    if (rng() % 3 == 0) {  // lean towards closing strings and containers, so walks end
      std::vector<int32_t> closing;
      for (int32_t id : ids) {
        if (vocab[id].find_first_of("\"]},") != std::string::npos) closing.push_back(id);
      }
      if (!closing.empty()) ids.swap(closing);
    }
    const std::string& t = vocab[ids[rng() % ids.size()]];
    if (!m.accept(t)) {
      ADD_FAILURE() << "an allowed token '" << t << "' was refused after '" << w.text << "'";
      return w;
    }
    w.text += t;
  }
  w.complete = m.complete();
  return w;
}

namespace {

using nlohmann::json;

size_t code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

bool valid_date(const std::string& s) {
  static const std::regex re(R"((\d{4})-(\d{2})-(\d{2}))");
  std::smatch m;
  if (!std::regex_match(s, m, re)) return false;
  const int y = std::stoi(m[1]), mo = std::stoi(m[2]), d = std::stoi(m[3]);
  const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  const int days[] = {31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return mo >= 1 && mo <= 12 && d >= 1 && d <= days[mo - 1];
}

bool valid_time(const std::string& s) {
  static const std::regex re(
      R"(([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))");
  return std::regex_match(s, re);
}

bool valid_format(const std::string& s, const std::string& format) {
  if (format == "date") return valid_date(s);
  if (format == "time") return valid_time(s);
  if (format == "date-time") {
    size_t t = s.find('T');
    return t != std::string::npos && valid_date(s.substr(0, t)) && valid_time(s.substr(t + 1));
  }
  static const std::regex uuid(
      R"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})");
  return format == "uuid" && std::regex_match(s, uuid);
}

bool is_type(const json& v, const std::string& t) {
  if (t == "integer")
    return v.is_number_integer() ||
           (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
  if (t == "number") return v.is_number();
  if (t == "string") return v.is_string();
  if (t == "boolean") return v.is_boolean();
  if (t == "null") return v.is_null();
  if (t == "object") return v.is_object();
  return t == "array" && v.is_array();
}

std::string check(const json& v, const json& s, const json& root);

std::string check_object(const json& v, const json& s, const json& root) {
  const json props = s.value("properties", json::object());
  for (const json& r : s.value("required", json::array())) {
    if (!v.contains(r.get<std::string>())) return "missing required " + r.dump();
  }
  for (const auto& [k, x] : v.items()) {
    std::string why;
    if (props.contains(k)) {
      why = check(x, props[k], root);
    } else if (s.contains("additionalProperties")) {
      why = check(x, s["additionalProperties"], root);
    }
    if (!why.empty()) return "member " + k + ": " + why;
  }
  return "";
}

std::string check_array(const json& v, const json& s, const json& root) {
  if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return "too few items";
  if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return "too many items";
  const json prefix = s.value("prefixItems", json::array());
  for (size_t i = 0; i < v.size(); ++i) {
    std::string why;
    if (i < prefix.size()) {
      why = check(v[i], prefix[i], root);
    } else if (s.contains("items")) {
      why = check(v[i], s["items"], root);
    }
    if (!why.empty()) return "item " + std::to_string(i) + ": " + why;
  }
  return "";
}

std::string check_scalar(const json& v, const json& s) {
  if (v.is_string()) {
    const std::string str = v.get<std::string>();
    if (s.contains("minLength") && code_points(str) < s["minLength"].get<size_t>())
      return "too short";
    if (s.contains("maxLength") && code_points(str) > s["maxLength"].get<size_t>())
      return "too long";
    if (s.contains("format") && !valid_format(str, s["format"]))
      return "not a " + s["format"].dump();
  }
  if (v.is_number()) {
    const double x = v.get<double>();
    if (s.contains("minimum") && x < s["minimum"].get<double>()) return "below minimum";
    if (s.contains("maximum") && x > s["maximum"].get<double>()) return "above maximum";
    if (s.contains("exclusiveMinimum") && x <= s["exclusiveMinimum"].get<double>())
      return "not above exclusiveMinimum";
    if (s.contains("exclusiveMaximum") && x >= s["exclusiveMaximum"].get<double>())
      return "not below exclusiveMaximum";
  }
  return "";
}

std::string check(const json& v, const json& s, const json& root) {
  if (s.is_boolean()) return s.get<bool>() ? "" : "false schema";
  if (s.contains("$ref")) {
    const std::string ref = s["$ref"].get<std::string>().substr(1);
    return check(v, root.at(json::json_pointer(ref)), root);
  }
  if (s.contains("type")) {
    const json types = s["type"].is_array() ? s["type"] : json::array({s["type"]});
    bool ok = false;
    for (const json& t : types) ok = ok || is_type(v, t.get<std::string>());
    if (!ok) return "not of type " + s["type"].dump();
  }
  if (s.contains("const") && v != s["const"]) return "not the const";
  if (s.contains("enum") && std::find(s["enum"].begin(), s["enum"].end(), v) == s["enum"].end())
    return "not in enum";
  for (const char* word : {"anyOf", "oneOf", "allOf"}) {
    if (!s.contains(word)) continue;
    size_t matches = 0;
    for (const json& sub : s[word]) matches += check(v, sub, root).empty();
    const std::string w = word;
    if ((w == "anyOf" && matches == 0) || (w == "oneOf" && matches != 1) ||
        (w == "allOf" && matches != s[word].size()))
      return w + " fails (" + std::to_string(matches) + " match)";
  }
  if (v.is_object()) return check_object(v, s, root);
  if (v.is_array()) return check_array(v, s, root);
  return check_scalar(v, s);
}

}  // namespace

std::string validate(const nlohmann::json& value, const nlohmann::json& schema) {
  return check(value, schema, schema);
}

}  // namespace unillm::infer::testing
