// The tool formats template_tools_more.cpp writes for template_tools.cpp's dispatch: gemma4,
// lfm2, minimax1 and minimax2 (LLaMA-Factory's tool_utils.py). Internal to src/data.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/template_tools.h"

namespace unillm::data::detail {

// tool_formatter / function_formatter of each format; DataError for a schema or call the
// Python would fail on (a tool that is not an object, arguments that are not a JSON object
// where the format iterates them).
std::string gemma4_tools(const nlohmann::ordered_json& tools);
std::string gemma4_calls(const std::vector<FunctionCall>& calls);
std::string lfm2_tools(const nlohmann::ordered_json& tools);
std::string lfm2_calls(const std::vector<FunctionCall>& calls);
std::string minimax_tools(bool m2, const nlohmann::ordered_json& tools);
std::string minimax_calls(bool m2, const std::vector<FunctionCall>& calls);

}  // namespace unillm::data::detail
