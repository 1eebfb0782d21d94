// A chat reply read as tool calls, in OpenAI's shape: the template's extractor
// (data::parse_tool_calls, LLaMA-Factory's Template.extract_tool) finds the calls, each becomes
// {"id": "call_<32 hex>", "type": "function", "function": {"name", "arguments"}} with arguments
// a JSON string, as LLaMA-Factory's api/chat.py answers.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "data/template.h"
#include "infer/grammar.h"

namespace unillm::serve {

// The tool_calls list for `text` under a template's definition (ChatTemplate::def(), whose
// tool_format picks the extractor), or nullopt when the extractor finds no call (the reply is
// then plain content; also for minimax's empty call block, where LLaMA-Factory answers an empty
// tool_calls list).
std::optional<nlohmann::json> tool_calls_json(const data::TemplateDef& tmpl,
                                              const std::string& text);

// The assistant message for `text`: {"role": "assistant", "content": null, "tool_calls": [...]}
// when it holds calls, {"role": "assistant", "content": text} otherwise; *called says which.
nlohmann::json tool_call_message(const data::TemplateDef& tmpl, const std::string& text,
                                 bool* called = nullptr);

// The grammar that forces a reply to be one call the template's extractor reads back
// (tool_choice "required": a call of any tool; a named function: a call of that one), the
// arguments matching the tool's parameters schema (infer/json_schema.h's subset). Built for the
// tool formats whose calls are JSON: default ("Action: NAME\nAction Input: ARGS"), glm4
// ("NAME\nARGS"), llama3 and mistral ({"name", "parameters"|"arguments"}), qwen, ling and
// glm4_moe (<tool_call>\n{"name", "arguments"}\n</tool_call>). Throws ApiError 400 naming the
// template for the others (gemma4, lfm2, minimax1, minimax2, qwen3_5, seed_oss: argument syntax
// that is not JSON, or one JSON per line), for a tool name the format cannot spell, and for a
// parameters schema the compiler does not support. tools_json is ParsedRequest::tools.
std::shared_ptr<const infer::Grammar> forced_call_grammar(const data::TemplateDef& tmpl,
                                                          const std::string& tools_json,
                                                          const std::string& only_tool);

// A fresh call id, "call_" and 32 random hex digits (LLaMA-Factory: f"call_{uuid4().hex}").
std::string new_call_id();

}  // namespace unillm::serve
