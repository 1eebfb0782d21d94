// Model reply → OpenAI tool_calls (tool_reply.h).
#include "serve/tool_reply.h"

#include <cctype>
#include <cstdint>
#include <random>

#include "core/error.h"
#include "data/tool_calls.h"
#include "infer/json_schema.h"
#include "serve/api.h"

namespace unillm::serve {

using nlohmann::json;

// 128 bits straight from the OS source: ids are rare (one per call) and need no shared state.
std::string new_call_id() {
  std::random_device rd;
  static const char* hex = "0123456789abcdef";
  std::string id = "call_";
  for (int word = 0; word < 4; ++word) {
    uint32_t bits = rd();
    for (int k = 0; k < 8; ++k, bits >>= 4) id += hex[bits & 15];
  }
  return id;
}

std::optional<json> tool_calls_json(const data::TemplateDef& tmpl, const std::string& text) {
  const auto calls = data::parse_tool_calls(tmpl, text);
  if (!calls || calls->empty()) return std::nullopt;
  json out = json::array();
  for (const auto& c : *calls)
    out.push_back({{"id", new_call_id()},
                   {"type", "function"},
                   {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  return out;
}

json tool_call_message(const data::TemplateDef& tmpl, const std::string& text, bool* called) {
  auto calls = tool_calls_json(tmpl, text);
  if (called) *called = calls.has_value();
  if (!calls) return {{"role", "assistant"}, {"content", text}};
  return {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", std::move(*calls)}};
}

namespace {

using ojson = nlohmann::ordered_json;

// {"name": NAME, key: PARAMS}: the call object of llama3, mistral and qwen.
ojson call_object(const std::string& name, const ojson& params, const char* key) {
  ojson o = {{"type", "object"},
             {"properties", {{"name", {{"const", name}}}, {key, params}}},
             {"required", {"name", key}}};
  // The parameters' definitions move to the root, where their "#/$defs/..." pointers now look.
  for (const char* defs : {"$defs", "definitions"})
    if (params.is_object() && params.contains(defs)) o[defs] = params[defs];
  return o;
}

bool word_name(const std::string& n) {  // the default extractor's [a-zA-Z0-9_]+
  for (char c : n)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  return !n.empty();
}

// One alternative for tool `name` with parameters schema `params` in format f; false when f's
// calls are not JSON.
bool call_text(const std::string& f, const std::string& name, const ojson& params,
               infer::JsonInText& out) {
  const std::string where = "tool '" + name + "'";
  if (f == "default") {
    if (!word_name(name))
      throw ApiError(400,
                     "'tool_choice': " + where +
                         ": the default tool format reads only names of letters, digits and '_'",
                     "tool_choice");
    out = {"Action: " + name + "\nAction Input: ", params, ""};
  } else if (f == "glm4") {
    if (name.find('\n') != std::string::npos)
      throw ApiError(400, "'tool_choice': " + where + ": glm4 tool names cannot hold a newline",
                     "tool_choice");
    out = {name + "\n", params, ""};
  } else if (f == "llama3" || f == "mistral") {
    out = {"", call_object(name, params, f == "llama3" ? "parameters" : "arguments"), ""};
  } else if (f == "qwen" || f == "ling" || f == "glm4_moe") {
    out = {"<tool_call>\n", call_object(name, params, "arguments"), "\n</tool_call>"};
  } else {
    return false;
  }
  return true;
}

}  // namespace

std::shared_ptr<const infer::Grammar> forced_call_grammar(const data::TemplateDef& tmpl,
                                                          const std::string& tools_json,
                                                          const std::string& only_tool) {
  const std::string f = tmpl.format_tools.empty() ? tmpl.tool_format : "";
  std::vector<infer::JsonInText> alts;
  for (const ojson& t : ojson::parse(tools_json)) {  // [{"name", "description", "parameters"}]
    const std::string name = t["name"].get<std::string>();
    if (!only_tool.empty() && name != only_tool) continue;
    infer::JsonInText a;
    if (f.empty() || !call_text(f, name, t["parameters"], a))
      throw ApiError(
          400,
          "'tool_choice': forcing a tool call is not supported with the chat template '" +
              tmpl.name + "' (tool format '" + (f.empty() ? "a string format" : f) +
              "': its calls are not one JSON value); use \"auto\"",
          "tool_choice");
    alts.push_back(std::move(a));
  }
  try {
    return infer::json_in_text_grammar(alts);
  } catch (const ConfigError& e) {
    throw ApiError(400, std::string("'tools': a forced call's parameters schema: ") + e.what(),
                   "tools");
  }
}

}  // namespace unillm::serve
