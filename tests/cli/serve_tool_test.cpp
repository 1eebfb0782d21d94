// The server's reply → OpenAI tool_calls conversion (src/serve/tool_reply.*): texts in the qwen
// and default tool formats become {"id": "call_<hex>", "type": "function", "function": {"name",
// "arguments" as a JSON string}}, with fresh ids; other texts stay plain content.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "core/error.h"
#include "data/template.h"
#include "serve/tool_reply.h"

namespace unillm::testing {
namespace {

using nlohmann::json;

const data::TemplateDef& def(const std::string& name) {
  const data::TemplateDef* d = data::find_template_def(name);
  EXPECT_NE(d, nullptr) << name;
  return *d;
}

void expect_call(const json& call, const std::string& name, const std::string& arguments) {
  EXPECT_TRUE(std::regex_match(call["id"].get<std::string>(), std::regex("call_[0-9a-f]{32}")))
      << call;
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], name);
  ASSERT_TRUE(call["function"]["arguments"].is_string()) << call;
  EXPECT_EQ(call["function"]["arguments"], arguments);
}

TEST(ServeToolReply, QwenToolCallBecomesToolCalls) {
  bool called = false;
  const json m = serve::tool_call_message(def("qwen"),
                                          "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                                          "{\"city\": \"Paris\"}}\n</tool_call>",
                                          &called);
  EXPECT_TRUE(called);
  EXPECT_EQ(m["role"], "assistant");
  EXPECT_TRUE(m["content"].is_null());
  ASSERT_EQ(m["tool_calls"].size(), 1u);
  expect_call(m["tool_calls"][0], "get_weather", "{\"city\": \"Paris\"}");
}

TEST(ServeToolReply, QwenParallelCallsGetDistinctIds) {
  const std::string text =
      "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1, \"s\": \"é\"}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>";
  const auto calls = serve::tool_calls_json(def("qwen"), text);
  ASSERT_TRUE(calls);
  ASSERT_EQ(calls->size(), 2u);
  expect_call((*calls)[0], "a",
              "{\"x\": 1, \"s\": \"é\"}");  // ensure_ascii=False, as LLaMA-Factory
  expect_call((*calls)[1], "b", "{}");
  EXPECT_NE((*calls)[0]["id"], (*calls)[1]["id"]);
}

TEST(ServeToolReply, DefaultFormatActionLinesBecomeToolCalls) {
  const std::string text = "Action: get_weather\nAction Input: {\"city\": \"Paris\", \"days\": 2}";
  const auto calls = serve::tool_calls_json(def("alpaca"), text);  // alpaca: the default format
  ASSERT_TRUE(calls);
  ASSERT_EQ(calls->size(), 1u);
  expect_call((*calls)[0], "get_weather", "{\"city\": \"Paris\", \"days\": 2}");
}

TEST(ServeToolReply, PlainTextStaysContent) {
  for (const char* name : {"qwen", "alpaca"}) {
    bool called = true;
    const json m = serve::tool_call_message(def(name), "Once upon a time", &called);
    EXPECT_FALSE(called) << name;
    EXPECT_EQ(m["content"], "Once upon a time") << name;
    EXPECT_FALSE(m.contains("tool_calls")) << name;
  }
  // A call cut off mid-JSON (max_tokens) is not a call either.
  EXPECT_FALSE(
      serve::tool_calls_json(def("qwen"), "<tool_call>\n{\"name\": \"get_weather\", \"argu"));
}

TEST(ServeToolReply, IdsAreFresh) {
  std::set<std::string> ids;
  for (int i = 0; i < 200; ++i) ids.insert(serve::new_call_id());
  EXPECT_EQ(ids.size(), 200u);
}

}  // namespace
}  // namespace unillm::testing
