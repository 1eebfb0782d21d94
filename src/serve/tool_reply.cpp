// Model reply → OpenAI tool_calls (tool_reply.h).
#include "serve/tool_reply.h"

#include <cstdint>
#include <random>

#include "data/tool_calls.h"

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
  if (!calls) return std::nullopt;
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

}  // namespace unillm::serve
