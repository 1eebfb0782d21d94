// Tool-call extraction per LLaMA-Factory tool format, written as small scanners that reproduce its
// regular expressions (lazy matches with look-ahead) without std::regex, whose recursion can
// overflow the stack on long replies.
#include "data/tool_calls.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"

namespace unillm::data {
namespace {

using ojson = nlohmann::ordered_json;
using Calls = std::vector<FunctionCall>;

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

size_t skip_space(const std::string& s, size_t i) {
  while (i < s.size() && is_space(s[i])) ++i;
  return i;
}

std::string strip(const std::string& s, const std::string& chars = " \t\n\r\v\f") {
  size_t b = s.find_first_not_of(chars);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(chars) - b + 1);
}

bool starts_at(const std::string& s, size_t i, const std::string& w) {
  return s.compare(i, w.size(), w) == 0;
}

std::optional<ojson> parse_json(const std::string& s) {
  try {
    return ojson::parse(s);
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

// The first p >= from where s[p:] matches \s*(word|$): the end of a lazy group followed by
// (?=\s*word|\s*$); npos when none.
size_t lazy_end(const std::string& s, size_t from, const std::string& word) {
  for (size_t p = from; p <= s.size(); ++p) {
    size_t r = skip_space(s, p);
    if (r == s.size() || starts_at(s, r, word)) return p;
  }
  return std::string::npos;
}

std::optional<Calls> extract_default(const std::string& s) {
  Calls out;
  bool any = false;
  for (size_t i = s.find("Action:"); i != std::string::npos; i = s.find("Action:", i + 1)) {
    size_t p = skip_space(s, i + 7), n = p;
    while (n < s.size() && (std::isalnum(static_cast<unsigned char>(s[n])) || s[n] == '_')) ++n;
    if (n == p) continue;
    size_t q = skip_space(s, n);
    if (!starts_at(s, q, "Action Input:")) continue;
    size_t v = skip_space(s, q + 13);
    if (v == s.size()) continue;  // .+ needs a character
    size_t e = lazy_end(s, v + 1, "Action:");
    std::string input = strip(strip(strip(s.substr(v, e - v)), "\""), "`");
    any = true;
    auto args = parse_json(input);
    if (!args) return std::nullopt;
    out.push_back({s.substr(p, n - p), py_json_dumps(*args)});
    i = e - 1;
  }
  if (!any) return std::nullopt;
  return out;
}

std::optional<Calls> extract_glm4(const std::string& s) {
  size_t nl = s.find('\n');
  if (nl == std::string::npos) return std::nullopt;
  auto args = parse_json(strip(s.substr(nl + 1)));
  if (!args) return std::nullopt;
  return Calls{{s.substr(0, nl), py_json_dumps(*args)}};
}

// llama3 / mistral: one JSON object or a list, each with "name" and key.
std::optional<Calls> extract_json(const std::string& s, const char* key) {
  auto v = parse_json(strip(s));
  if (!v) return std::nullopt;
  if (!v->is_array()) *v = ojson::array({*v});
  Calls out;
  for (const ojson& t : *v) {
    if (!t.is_object() || !t.contains("name") || !t.contains(key) || !t["name"].is_string())
      return std::nullopt;
    out.push_back({t["name"].get<std::string>(), py_json_dumps(t[key])});
  }
  return out;
}

// <tool_call>(.+?)</tool_call>(?=\s*<tool_call>|\s*$), each group {"name", "arguments"}.
std::optional<Calls> extract_qwen(const std::string& s) {
  const std::string open = "<tool_call>", close = "</tool_call>";
  std::vector<std::string> groups;
  for (size_t i = s.find(open); i != std::string::npos;) {
    size_t body = i + open.size(), e = std::string::npos;
    for (size_t c = s.find(close, body + 1); c != std::string::npos; c = s.find(close, c + 1)) {
      size_t r = skip_space(s, c + close.size());
      if (r == s.size() || starts_at(s, r, open)) {
        e = c;
        break;
      }
    }
    if (e == std::string::npos) {
      i = s.find(open, i + 1);
      continue;
    }
    groups.push_back(s.substr(body, e - body));
    i = s.find(open, e + close.size());
  }
  if (groups.empty()) return std::nullopt;
  Calls out;
  for (const std::string& g : groups) {
    auto t = parse_json(strip(g));
    if (!t || !t->is_object() || !t->contains("name") || !t->contains("arguments") ||
        !(*t)["name"].is_string())
      return std::nullopt;
    out.push_back({(*t)["name"].get<std::string>(), py_json_dumps((*t)["arguments"])});
  }
  return out;
}

// <OPEN>\s*<function=\s*NAME\s*(BODY)\s*</function>\s*</CLOSE> with <parameter=K>V</parameter>
// pairs in BODY; values parsed as JSON when they are JSON (stripped), else kept as text
// (stripped for qwen3_5, raw for seed_oss).
std::optional<Calls> extract_xml(const std::string& s, const std::string& open,
                                 const std::string& close, bool strip_raw, bool name_stops_at_gt) {
  Calls out;
  for (size_t i = s.find(open); i != std::string::npos; i = s.find(open, i + 1)) {
    size_t f = skip_space(s, i + open.size());
    if (!starts_at(s, f, "<function=")) continue;
    size_t n0 = skip_space(s, f + 10), n1 = n0;
    while (n1 < s.size() && !is_space(s[n1]) && s[n1] != '<' && !(name_stops_at_gt && s[n1] == '>'))
      ++n1;
    if (n1 == n0) continue;
    size_t b0 = skip_space(s, n1), b1 = std::string::npos, end = 0;
    for (size_t p = b0; p <= s.size() && b1 == std::string::npos; ++p) {
      size_t r = skip_space(s, p);
      if (!starts_at(s, r, "</function>")) continue;
      size_t r2 = skip_space(s, r + 11);
      if (starts_at(s, r2, close)) b1 = p, end = r2 + close.size();
    }
    if (b1 == std::string::npos) continue;
    const std::string block = strip(s.substr(b0, b1 - b0));
    ojson args = ojson::object();
    for (size_t k = block.find("<parameter="); k != std::string::npos;
         k = block.find("<parameter=", k)) {
      size_t gt = block.find('>', k + 11);
      if (gt == std::string::npos) break;
      size_t ve = block.find("</parameter>", gt + 1);
      if (ve == std::string::npos) break;
      const std::string key = block.substr(k + 11, gt - k - 11),
                        raw = block.substr(gt + 1, ve - gt - 1);
      auto parsed = parse_json(strip(raw));
      args[key] = parsed ? *parsed : ojson(strip_raw ? strip(raw) : raw);
      k = ve + 12;
    }
    out.push_back({strip(s.substr(n0, n1 - n0)), py_json_dumps(args)});
    i = end - 1;
  }
  if (out.empty()) return std::nullopt;
  return out;
}

}  // namespace

std::optional<std::vector<FunctionCall>> parse_tool_calls(const std::string& f,
                                                          const std::string& text) {
  check_tool_format(f, "parse_tool_calls");
  const auto& n = tool_format_names();
  if (std::find(n.begin(), n.end(), f) == n.end())
    UNILLM_THROW(NotImplemented, "[template] tool format '", f,
                 "': reading tool calls is not implemented");
  if (f == "default") return extract_default(text);
  if (f == "glm4") return extract_glm4(text);
  if (f == "llama3") return extract_json(text, "parameters");
  if (f == "mistral") return extract_json(text, "arguments");
  if (f == "qwen3_5") return extract_xml(text, "<tool_call>", "</tool_call>", true, true);
  if (f == "seed_oss")
    return extract_xml(text, "<seed:tool_call>", "</seed:tool_call>", false, false);
  return extract_qwen(text);  // qwen, ling, glm4_moe (LLaMA-Factory's GLM4MOE inherits it)
}

std::optional<std::vector<FunctionCall>> parse_tool_calls(const TemplateDef& def,
                                                          const std::string& text) {
  if (!def.format_tools.empty())
    UNILLM_THROW(NotImplemented, "[template] '", def.name,
                 "' writes tools through a string format; it has no tool-call reader");
  return parse_tool_calls(def.tool_format, text);
}

std::optional<std::vector<FunctionCall>> parse_tool_calls(const ChatTemplate& t,
                                                          const std::string& text) {
  return parse_tool_calls(t.def(), text);
}

}  // namespace unillm::data
