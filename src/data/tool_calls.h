// Function calls read back out of a model's reply, as each tool format's tool_extractor in
// LLaMA-Factory's tool_utils.py (the inverse of the template's function format): what the server
// turns into OpenAI tool_calls.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "data/template.h"
#include "data/template_tools.h"

namespace unillm::data {

// The calls in `text` as `family`'s extractor finds them (arguments re-serialised as
// json.dumps(..., ensure_ascii=False)); nullopt when the text is not a tool call (LLaMA-Factory
// returns the text unchanged then). Extractors: default "Action: NAME\nAction Input: JSON" (one
// or more); glm4 "NAME\nJSON"; llama3 {"name", "parameters"} JSON or a list; mistral {"name",
// "arguments"} JSON or a list; qwen, ling and glm4_moe <tool_call>{"name", "arguments"}
// </tool_call>…; qwen3_5 <tool_call><function=NAME><parameter=KEY>VALUE</parameter>…;
// seed_oss the same inside <seed:tool_call>; minimax1 {"name", "arguments"} JSON lines inside
// <tool_calls>; minimax2 <invoke name="N"><parameter name="K">V</parameter>… inside
// <minimax:tool_call>; gemma4 <|tool_call>call:NAME{k:v,…}<tool_call|> (strings in <|"|>);
// lfm2 Python calls [f(k=v, …), …] inside <|tool_call_start|>…<|tool_call_end|>. minimax1 and
// minimax2 answer an empty list for a block without calls (as the Python does); where a Python
// extractor would raise (minimax1: a JSON line without "name"), nullopt.
std::optional<std::vector<FunctionCall>> parse_tool_calls(const std::string& family,
                                                          const std::string& text);
// With the template's tool format (LLaMA-Factory's Template.extract_tool).
std::optional<std::vector<FunctionCall>> parse_tool_calls(const TemplateDef& def,
                                                          const std::string& text);
std::optional<std::vector<FunctionCall>> parse_tool_calls(const ChatTemplate& t,
                                                          const std::string& text);

}  // namespace unillm::data
