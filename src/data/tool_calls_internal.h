// Tool-call readers split from tool_calls.cpp by size: LFM2's Python call syntax. Internal to
// src/data.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "data/template_tools.h"

namespace unillm::data::detail {

// LFM2ToolUtils.tool_extractor: the calls between <|tool_call_start|> and <|tool_call_end|>
// (one call or a list of calls, keyword arguments as Python literals or true/false/null), or
// nullopt where LLaMA-Factory returns the text: a syntax error, something that is not a call of
// a plain name, a keyword value ast.literal_eval refuses, no call. Outside the parsed subset
// (also read as text): operators in positional arguments, *args/**kwargs, \N{...} escapes, a
// number beyond 64 bits, a value json.dumps refuses (bytes, sets, complex numbers).
std::optional<std::vector<FunctionCall>> extract_lfm2(const std::string& text);

}  // namespace unillm::data::detail
