// Fuzz target for the tool-call readers (data::parse_tool_calls, src/data/tool_calls*.cpp): a
// model's reply read by every tool format's extractor never crashes or hangs, and every call's
// arguments are JSON text (gemma4 aside: it keeps argument text it cannot read).
// See docs/fuzzing.md.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "data/template_tools.h"
#include "data/tool_calls.h"
#include "fuzz_support.h"

namespace {

bool valid_utf8(const std::string& s) {
  try {
    (void)nlohmann::json(s).dump();
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace unillm;
  if (size > (1 << 16)) return 0;
  const std::string text(fuzz::bytes_of(data, size));
  const bool utf8 = valid_utf8(text);  // a reader keeps bytes as they are: JSON needs UTF-8
  for (const std::string& f : data::tool_format_names()) {
    const auto calls = data::parse_tool_calls(f, text);
    if (!calls || f == "gemma4" || !utf8) continue;
    for (const auto& c : *calls)  // lfm2: json.dumps writes an infinite float as Infinity
      fuzz::require(nlohmann::json::accept(c.arguments) ||
                        (f == "lfm2" && c.arguments.find("Infinity") != std::string::npos),
                    "arguments are JSON text");
  }
  return 0;
}
