// Tool-call extraction per LLaMA-Factory tool format, written as small scanners that reproduce its
// regular expressions (lazy matches with look-ahead) without std::regex, whose recursion can
// overflow the stack on long replies.
#include "data/tool_calls.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"
#include "data/tool_calls_internal.h"

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

// re.search(OPEN\s*(.+?)\s*CLOSE, DOTALL).group(1): the first OPEN with a CLOSE after at least
// one more character; the group loses the whitespace at both ends unless it is only whitespace.
std::optional<std::string> tagged_block(const std::string& s, const std::string& open,
                                        const std::string& close) {
  for (size_t i = s.find(open); i != std::string::npos; i = s.find(open, i + 1)) {
    const size_t a = i + open.size(), g = skip_space(s, a);
    size_t c = g < s.size() ? s.find(close, g + 1) : std::string::npos;
    if (c != std::string::npos) {
      while (c > g + 1 && is_space(s[c - 1])) --c;
      return s.substr(g, c - g);
    }
    if (g > a && starts_at(s, g, close)) return s.substr(g - 1, 1);  // \s* gives one back
  }
  return std::nullopt;
}

// MiniMax-M1: one {"name", "arguments"} JSON per line inside <tool_calls>; lines that are not
// JSON are skipped. A JSON line without name/arguments makes LLaMA-Factory raise; here the reply
// is plain text then. No block: nullopt; a block without calls: an empty list (as the Python).
std::optional<Calls> extract_minimax1(const std::string& s) {
  auto block = tagged_block(s, "<tool_calls>", "</tool_calls>");
  if (!block) return std::nullopt;
  Calls out;
  size_t b = 0;
  while (b <= block->size()) {
    size_t e = block->find('\n', b);
    if (e == std::string::npos) e = block->size();
    const std::string line = strip(block->substr(b, e - b));
    b = e + 1;
    if (line.empty()) continue;
    auto t = parse_json(line);
    if (!t) continue;
    if (!t->is_object() || !t->contains("name") || !t->contains("arguments") ||
        !(*t)["name"].is_string())
      return std::nullopt;
    out.push_back({(*t)["name"].get<std::string>(), py_json_dumps((*t)["arguments"])});
  }
  return out;
}

// Each (.*?) of OPEN(.*?)MID(.*?)CLOSE in `s` from `from`, left to right (re.findall).
std::vector<std::pair<std::string, std::string>> find_pairs(const std::string& s,
                                                            const std::string& open,
                                                            const std::string& mid,
                                                            const std::string& close) {
  std::vector<std::pair<std::string, std::string>> out;
  for (size_t i = s.find(open); i != std::string::npos;) {
    const size_t m = s.find(mid, i + open.size());
    const size_t c = m == std::string::npos ? m : s.find(close, m + mid.size());
    if (c == std::string::npos) {
      i = s.find(open, i + 1);
      continue;
    }
    out.emplace_back(s.substr(i + open.size(), m - i - open.size()),
                     s.substr(m + mid.size(), c - m - mid.size()));
    i = s.find(open, c + close.size());
  }
  return out;
}

// MiniMax-M2: <invoke name="N"><parameter name="K">V</parameter>...</invoke> inside the first
// <minimax:tool_call> block; values parsed as JSON when their stripped text is JSON, else raw.
std::optional<Calls> extract_minimax2(const std::string& s) {
  auto block = tagged_block(s, "<minimax:tool_call>", "</minimax:tool_call>");
  if (!block) return std::nullopt;
  Calls out;
  for (const auto& [name, body] : find_pairs(*block, "<invoke name=\"", "\">", "</invoke>")) {
    ojson args = ojson::object();
    for (const auto& [key, raw] : find_pairs(body, "<parameter name=\"", "\">", "</parameter>")) {
      auto v = parse_json(strip(raw));
      args[key] = v ? *v : ojson(raw);
    }
    out.push_back({strip(name), py_json_dumps(args)});
  }
  return out;
}

// Gemma 4's argument text (k:v,... with strings in <|"|> quotes) as JSON: the quoted strings
// become JSON strings, then every identifier before a ':' that follows '{', ',' or whitespace is
// quoted (also inside strings, as LLaMA-Factory's regex does).
std::string gemma4_normalize(const std::string& text) {
  const std::string q = "<|\"|>";
  std::string a;
  size_t i = 0;
  for (size_t o = text.find(q); o != std::string::npos; o = text.find(q, i)) {
    const size_t c = text.find(q, o + q.size());
    if (c == std::string::npos) break;
    a += text.substr(i, o - i) + py_json_dumps(ojson(text.substr(o + q.size(), c - o - q.size())));
    i = c + q.size();
  }
  a += text.substr(i);
  auto word_start = [](char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; };
  auto word_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  std::string out;
  for (size_t p = 0; p < a.size();) {
    out += a[p];
    if (!(a[p] == '{' || a[p] == ',' || is_space(a[p])) || p + 1 >= a.size() ||
        !word_start(a[p + 1])) {
      ++p;
      continue;
    }
    size_t w = p + 1;
    while (w < a.size() && word_char(a[w])) ++w;
    const size_t colon = skip_space(a, w);
    if (colon < a.size() && a[colon] == ':') {
      out += "\"" + a.substr(p + 1, w - p - 1) + "\"" + a.substr(w, colon + 1 - w);
      p = colon + 1;
    } else {
      ++p;
    }
  }
  return out;
}

// Gemma 4: <|tool_call>call:NAME{ARGS}<tool_call|>, ARGS read as gemma4_normalize's JSON object,
// else as JSON, else kept as text (the arguments are then not JSON, as in LLaMA-Factory).
std::optional<Calls> extract_gemma4(const std::string& s) {
  const std::string open = "<|tool_call>call:", close = "}<tool_call|>";
  Calls out;
  for (size_t i = s.find(open); i != std::string::npos;) {
    size_t n = i + open.size(), e = n;
    while (e < s.size() && s[e] != '{' && !is_space(s[e])) ++e;
    const size_t c =
        e > n && e < s.size() && s[e] == '{' ? s.find(close, e + 1) : std::string::npos;
    if (c == std::string::npos) {
      i = s.find(open, i + 1);
      continue;
    }
    const std::string text = strip(s.substr(e + 1, c - e - 1));
    std::string args = "{}";
    if (!text.empty()) {
      auto v = parse_json(gemma4_normalize("{" + text + "}"));
      if (!v) v = parse_json(text);
      args = !v ? text : v->is_string() ? v->get<std::string>() : py_json_dumps(*v);
    }
    out.push_back({strip(s.substr(n, e - n)), args});
    i = s.find(open, c + close.size());
  }
  if (out.empty()) return std::nullopt;
  return out;
}

}  // namespace

std::optional<std::vector<FunctionCall>> parse_tool_calls(const std::string& f,
                                                          const std::string& text) {
  check_tool_format(f, "parse_tool_calls");
  if (f == "gemma4") return extract_gemma4(text);
  if (f == "lfm2") return detail::extract_lfm2(text);
  if (f == "minimax1") return extract_minimax1(text);
  if (f == "minimax2") return extract_minimax2(text);
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
