// A chat reply read as tool calls, in OpenAI's shape: the template's extractor
// (data::parse_tool_calls, LLaMA-Factory's Template.extract_tool) finds the calls, each becomes
// {"id": "call_<32 hex>", "type": "function", "function": {"name", "arguments"}} with arguments
// a JSON string, as LLaMA-Factory's api/chat.py answers.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "data/template.h"

namespace unillm::serve {

// The tool_calls list for `text` under a template's definition (ChatTemplate::def(), whose
// tool_format picks the extractor), or nullopt when the extractor finds no call (the reply is
// then plain content). Throws NotImplemented for a tool format unillm lacks.
std::optional<nlohmann::json> tool_calls_json(const data::TemplateDef& tmpl,
                                              const std::string& text);

// The assistant message for `text`: {"role": "assistant", "content": null, "tool_calls": [...]}
// when it holds calls, {"role": "assistant", "content": text} otherwise; *called says which.
nlohmann::json tool_call_message(const data::TemplateDef& tmpl, const std::string& text,
                                 bool* called = nullptr);

// A fresh call id, "call_" and 32 random hex digits (LLaMA-Factory: f"call_{uuid4().hex}").
std::string new_call_id();

}  // namespace unillm::serve
