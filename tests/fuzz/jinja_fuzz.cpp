// Fuzz target for the Jinja chat-template renderer (src/io/jinja/): the input is a template,
// parsed and rendered on a fixed conversation with tools. It must render or throw
// unillm::ConfigError; never crash, hang, recurse without bound or allocate without limit.
#include <cstdint>

#include "fuzz_support.h"
#include "io/jinja/jinja.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace unillm;
  if (size > (1 << 16)) return 0;  // real chat templates are < 20 KB
  static const nlohmann::ordered_json context = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are helpful."},
      {"role": "user", "content": "Weather in Paris? \u00e9"},
      {"role": "assistant", "content": "", "tool_calls": [{"id": "call12345", "type": "function",
        "function": {"name": "get_weather", "arguments": {"location": "Paris"}}}]},
      {"role": "tool", "tool_call_id": "call12345", "content": "{\"t\": 22}"},
      {"role": "assistant", "content": "<think>\nok\n</think>\n\n22 degrees."}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "d",
      "parameters": {"type": "object", "properties": {"location": {"type": "string"}},
      "required": ["location"]}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>",
    "enable_thinking": false})");
  try {
    jinja::Template t = jinja::parse(std::string(fuzz::bytes_of(data, size)), "fuzz.jinja");
    t.limits.max_output = 1 << 20;
    t.limits.max_steps = 200000;
    std::string out = t.render(context);
    fuzz::require(out.size() <= t.limits.max_output, "output within max_output");
  } catch (const ConfigError& e) {
    fuzz::expect_input_error(e);
  }
  return 0;
}
