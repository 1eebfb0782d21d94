// Forced tool calls (tool_choice "required" or a named function, src/serve/tool_reply.cpp's
// forced_call_grammar): for each tool format whose calls are JSON, the grammar accepts exactly
// the texts the format's extractor reads as a call of an allowed tool with valid arguments, and
// every text it completes is read back as that call; the other formats answer 400.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "data/template.h"
#include "data/tool_calls.h"
#include "serve/api.h"
#include "serve/tool_reply.h"

namespace unillm::testing {
namespace {

const char* kTools =
    R"([{"name": "get_weather", "description": "", "parameters": {"type": "object", "properties": )"
    R"({"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}, )"
    R"({"name": "add", "description": "", "parameters": {"type": "object", "properties": )"
    R"({"a": {"type": "number"}}, "required": ["a"]}}])";

data::TemplateDef with_format(const std::string& format) {
  data::TemplateDef d = *data::find_template_def("qwen");
  d.tool_format = d.function_format = format;
  return d;
}

// The text of one call in `format`, arguments as written.
std::string call_text(const std::string& format, const std::string& name, const std::string& args) {
  if (format == "default") return "Action: " + name + "\nAction Input: " + args;
  if (format == "glm4") return name + "\n" + args;
  const std::string key = format == "llama3" ? "parameters" : "arguments";
  const std::string obj = "{\"name\": \"" + name + "\", \"" + key + "\": " + args + "}";
  if (format == "llama3" || format == "mistral") return obj;
  return "<tool_call>\n" + obj + "\n</tool_call>";  // qwen, ling, glm4_moe
}

bool completes(const std::shared_ptr<const infer::Grammar>& g, const std::string& text) {
  infer::GrammarMatcher m(g);
  return m.accept(text) && m.complete();
}

TEST(ServeToolChoice, GrammarForcesACallTheExtractorReads) {
  for (const char* f : {"default", "glm4", "llama3", "mistral", "qwen", "ling", "glm4_moe"}) {
    SCOPED_TRACE(f);
    const data::TemplateDef d = with_format(f);
    const auto any = serve::forced_call_grammar(d, kTools, "");
    const std::string weather = call_text(f, "get_weather", R"({"city": "Paris", "days": 2})");
    const std::string add = call_text(f, "add", R"({"a": -1.5})");
    EXPECT_TRUE(completes(any, weather));
    EXPECT_TRUE(completes(any, add));
    for (const std::string& text : {weather, add}) {  // what the grammar admits is a call
      const auto calls = data::parse_tool_calls(d, text);
      ASSERT_TRUE(calls.has_value()) << text;
      ASSERT_EQ(calls->size(), 1u);
    }
    EXPECT_EQ(data::parse_tool_calls(d, add)->at(0).arguments, R"({"a": -1.5})");
    // Arguments must fit the tool's schema; an unknown tool, or plain text, is not admitted.
    EXPECT_FALSE(completes(any, call_text(f, "get_weather", R"({"days": 2})")));
    EXPECT_FALSE(completes(any, call_text(f, "get_weather", R"({"city": 7})")));
    EXPECT_FALSE(completes(any, call_text(f, "other", R"({"a": 1})")));
    EXPECT_FALSE(completes(any, "Sure, the weather is"));
    // A named function: only that one.
    const auto only_add = serve::forced_call_grammar(d, kTools, "add");
    EXPECT_TRUE(completes(only_add, add));
    EXPECT_FALSE(completes(only_add, weather));
  }
}

TEST(ServeToolChoice, FormatsWithoutJsonCallsAnswer400NamingTheTemplate) {
  for (const char* f : {"gemma4", "lfm2", "minimax1", "minimax2", "qwen3_5", "seed_oss"}) {
    SCOPED_TRACE(f);
    try {
      serve::forced_call_grammar(with_format(f), kTools, "");
      ADD_FAILURE() << "accepted";
    } catch (const serve::ApiError& e) {
      EXPECT_EQ(e.status, 400);
      EXPECT_EQ(e.param, "tool_choice");
      EXPECT_NE(std::string(e.what()).find("'qwen'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what();
    }
  }
}

TEST(ServeToolChoice, NamesAndSchemasTheGrammarCannotHonourAnswer400) {
  const std::string dashed =
      R"([{"name": "get-weather", "description": "", "parameters": {"type": "object"}}])";
  EXPECT_THROW(serve::forced_call_grammar(with_format("default"), dashed, ""), serve::ApiError);
  EXPECT_NO_THROW(serve::forced_call_grammar(with_format("qwen"), dashed, ""));
  const std::string pattern =
      R"([{"name": "f", "description": "", "parameters": {"type": "object", "properties": )"
      R"({"s": {"type": "string", "pattern": "a+"}}}}])";
  try {
    serve::forced_call_grammar(with_format("qwen"), pattern, "");
    ADD_FAILURE() << "accepted";
  } catch (const serve::ApiError& e) {
    EXPECT_EQ(e.param, "tools");
    EXPECT_NE(std::string(e.what()).find("pattern"), std::string::npos) << e.what();
  }
}

TEST(ServeToolChoice, RefsToTheParametersDefinitionsResolve) {
  const std::string tools =
      R"([{"name": "f", "description": "", "parameters": {"type": "object", "properties": )"
      R"({"p": {"$ref": "#/$defs/point"}}, "required": ["p"], "$defs": {"point": {"type": )"
      R"("object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}}}}])";
  for (const char* f : {"default", "qwen", "llama3"}) {
    SCOPED_TRACE(f);
    const auto g = serve::forced_call_grammar(with_format(f), tools, "f");
    EXPECT_TRUE(completes(g, call_text(f, "f", R"({"p": {"x": 3}})")));
    EXPECT_FALSE(completes(g, call_text(f, "f", R"({"p": {"y": 3}})")));
  }
}

TEST(ServeToolChoice, RequestsSayWhichCallIsForced) {
  const std::string head =
      R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", )"
      R"("function": {"name": "f"}}, {"type": "function", "function": {"name": "g"}}])";
  auto parse = [&](const std::string& extra) {
    return serve::parse_request(head + extra + "}", serve::Endpoint::chat, {});
  };
  const auto plain = parse("");
  EXPECT_FALSE(plain.force_tool_call);
  EXPECT_FALSE(plain.tools.empty());
  const auto required = parse(R"(, "tool_choice": "required")");
  EXPECT_TRUE(required.force_tool_call);
  EXPECT_EQ(required.forced_tool, "");
  EXPECT_EQ(required.tools, plain.tools);
  const auto named = parse(R"(, "tool_choice": {"type": "function", "function": {"name": "g"}})");
  EXPECT_TRUE(named.force_tool_call);
  EXPECT_EQ(named.forced_tool, "g");
  EXPECT_TRUE(parse(R"(, "tool_choice": "none")").tools.empty());
  EXPECT_THROW(parse(R"(, "tool_choice": {"type": "function", "function": {"name": "h"}})"),
               serve::ApiError);
}

}  // namespace
}  // namespace unillm::testing
