// Tool schemas and function calls as text, per tool format of LLaMA-Factory's tool_utils.py
// (default, gemma4, glm4, glm4_moe, lfm2, llama3, ling, minimax1, minimax2, mistral, qwen,
// qwen3_5, seed_oss): what a chat template puts into the system prompt for a `tools` list and
// into the assistant turn for a call. JSON is written byte for byte as Python's json.dumps
// writes it (key order kept).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace unillm::data {

// One function call: arguments is JSON text (as json.dumps(..., ensure_ascii=False) writes it).
struct FunctionCall {
  std::string name;
  std::string arguments;
  bool operator==(const FunctionCall&) const = default;
};

// Python's json.dumps(v, ensure_ascii=False, indent=indent): indent < 0 is indent=None
// (", " / ": " separators, one line); floats as Python's repr (shortest round trip).
std::string py_json_dumps(const nlohmann::ordered_json& v, int indent = -1);

// LLaMA-Factory's tool formats (its tool_utils.py TOOLS), sorted; unillm implements all of them.
const std::vector<std::string>& tool_format_names();
bool is_known_tool_format(const std::string& family);
// Throws ConfigError for a name LLaMA-Factory does not have either.
void check_tool_format(const std::string& family, const std::string& what);

// ToolUtils.tool_formatter: the system-prompt text for `tools` (a JSON list of schemas, each
// {"name", "description", "parameters"} or {"type": "function", "function": {...}}). date is the
// llama3 prompt's "Today Date". Throws DataError for a schema missing a key the format reads.
std::string format_tools(const std::string& family, const nlohmann::ordered_json& tools,
                         const std::string& date);

// ToolUtils.function_formatter: the assistant text of calls (glm4: exactly one call).
std::string format_function_calls(const std::string& family,
                                  const std::vector<FunctionCall>& calls);

// FunctionFormatter._parse_functions: a function message's JSON (one {"name", "arguments"} object
// or a list of them) as calls, arguments re-serialised; DataError naming `where` otherwise.
std::vector<FunctionCall> parse_function_message(const std::string& json_text,
                                                 const std::string& where);

}  // namespace unillm::data
