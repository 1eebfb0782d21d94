// Tool formats and tool-call reading against the string goldens of tools/make_template_goldens.py
// (tool_formats: the prompt for a tools list, the text of calls, and what LLaMA-Factory's
// extractor reads back from probe texts, per format), plus json.dumps formatting and errors.
#include "data/tool_calls.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/error.h"
#include "data/template_tools.h"

namespace unillm::data::testing {

const nlohmann::json& template_goldens();  // template_test.cpp
const io::Tokenizer& golden_tokenizer(const std::string& key);

namespace {

using ojson = nlohmann::ordered_json;

const char* kTools =
    "[{\"name\": \"get_weather\", \"description\": \"Weather of a city — today\", \"parameters\": "
    "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", \"description\": "
    "\"City name\"}, \"unit\": {\"type\": \"string\", \"description\": \"Unit\", \"enum\": "
    "[\"celsius\", \"fahrenheit\"]}, \"days\": {\"type\": \"array\", \"description\": \"Days "
    "ahead\", \"items\": {\"type\": \"integer\"}}}, \"required\": [\"city\"]}}, {\"type\": "
    "\"function\", \"function\": {\"name\": \"add\", \"description\": \"Adds two numbers\", "
    "\"parameters\": {\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"number\"}, \"b\": "
    "{\"type\": \"number\"}}, \"required\": [\"a\", \"b\"]}}}]";

TEST(ToolFormats, MatchGoldens) {
  const auto& g = template_goldens()["tool_formats"];
  const std::string date = template_goldens()["tool_date"];
  const auto one = parse_function_message(
      "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\", "
      "\"days\": [1, 2]}}",
      "test");
  const auto two = parse_function_message(
      "[{\"name\": \"add\", \"arguments\": {\"a\": 1.5, \"b\": 2}}, {\"name\": \"get_weather\", "
      "\"arguments\": {\"city\": \"巴黎\"}}]",
      "test");
  int probes = 0;
  for (auto it = g.begin(); it != g.end(); ++it) {
    const std::string f = it.key();
    SCOPED_TRACE(f);
    EXPECT_EQ(format_tools(f, ojson::parse(kTools), date), it.value()["tools"].get<std::string>());
    EXPECT_EQ(format_function_calls(f, one), it.value()["calls"][0].get<std::string>());
    if (f != "glm4") {
      EXPECT_EQ(format_function_calls(f, two), it.value()["calls"][1].get<std::string>());
    }
    for (const auto& p : it.value()["extract"]) {
      const std::string text = p["text"];
      SCOPED_TRACE(text);
      auto got = parse_tool_calls(f, text);
      if (p["calls"].is_null()) {
        EXPECT_FALSE(got.has_value());
        continue;
      }
      ASSERT_TRUE(got.has_value());
      ASSERT_EQ(got->size(), p["calls"].size());
      for (size_t k = 0; k < got->size(); ++k) {
        EXPECT_EQ((*got)[k].name, p["calls"][k][0].get<std::string>());
        EXPECT_EQ((*got)[k].arguments, p["calls"][k][1].get<std::string>());
      }
      ++probes;
    }
  }
  EXPECT_EQ(g.size(), tool_format_names().size());
  EXPECT_GE(probes, 20);
}

TEST(ToolFormats, PythonJsonDumps) {
  EXPECT_EQ(py_json_dumps(ojson::parse(R"({"a": [1, 2.5, -0.0001, 1e-05, 1e16, 123.0], "b": {}})")),
            R"({"a": [1, 2.5, -0.0001, 1e-05, 1e+16, 123.0], "b": {}})");
  EXPECT_EQ(py_json_dumps(ojson::parse(R"({"s": "é\n\u0001\"\\", "t": true, "n": null})")),
            "{\"s\": \"é\\n\\u0001\\\"\\\\\", \"t\": true, \"n\": null}");
  EXPECT_EQ(py_json_dumps(ojson::parse(R"({"a": [1, {"b": []}]})"), 2),
            "{\n  \"a\": [\n    1,\n    {\n      \"b\": []\n    }\n  ]\n}");
}

TEST(ToolFormats, RoundTripThroughEveryFormat) {
  const std::vector<FunctionCall> calls = {{"lookup", R"({"q": "x y", "n": 3})"}};
  for (const std::string& f : tool_format_names()) {
    if (f == "glm4_moe") continue;  // LLaMA-Factory reads glm4_moe calls with the qwen extractor
    SCOPED_TRACE(f);
    std::string text = format_function_calls(f, calls);
    // minimax2's template slot, not its function formatter, writes the block around the calls.
    if (f == "minimax2") text = "<minimax:tool_call>\n" + text + "\n</minimax:tool_call>";
    auto back = parse_tool_calls(f, text);
    ASSERT_TRUE(back.has_value());
    ASSERT_EQ(back->size(), 1u);
    EXPECT_EQ(back->at(0).name, "lookup");
    // gemma4 writes the keys sorted
    EXPECT_EQ(nlohmann::json::parse(back->at(0).arguments), nlohmann::json::parse(calls[0].arguments));
  }
}

TEST(ToolFormats, Errors) {
  EXPECT_THROW(format_tools("gemma4", ojson::parse("[1]"), "d"), DataError);
  EXPECT_THROW(format_tools("gemma4", ojson::parse(R"([{"description": "no name"}])"), "d"),
               DataError);
  EXPECT_THROW(format_function_calls("lfm2", {{"f", "[1]"}}), DataError);
  EXPECT_THROW(format_function_calls("minimax2", {{"f", "not json"}}), DataError);
  // gemma4 writes arguments that are not JSON as they are, as LLaMA-Factory does.
  EXPECT_EQ(format_function_calls("gemma4", {{"f", "a b"}}), "<|tool_call>call:f{a b}<tool_call|>");
  EXPECT_THROW(parse_tool_calls("nope", "x"), ConfigError);
  EXPECT_THROW(format_tools("default", ojson::parse(R"([{"name": "f"}])"), "d"), DataError);
  EXPECT_THROW(format_function_calls("glm4", {{"a", "{}"}, {"b", "{}"}}), DataError);
  EXPECT_THROW(parse_function_message("[1]", "m"), DataError);
  // A template's own format, and an unknown tool_format option.
  const io::Tokenizer& tok = golden_tokenizer("qwen2");
  auto qwen = ChatTemplate::by_name("qwen", tok);
  auto calls =
      parse_tool_calls(*qwen, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>");
  ASSERT_TRUE(calls.has_value());
  EXPECT_EQ(calls->at(0).name, "f");
  TemplateOptions o;
  o.tool_format = "nope";
  EXPECT_THROW(ChatTemplate::by_name("qwen", tok, o), ConfigError);
  o.tool_format = "llama3";  // LLaMA-Factory's tool_format overrides the template's formats
  EXPECT_EQ(ChatTemplate::by_name("qwen", tok, o)->def().tool_format, "llama3");
}

}  // namespace
}  // namespace unillm::data::testing
