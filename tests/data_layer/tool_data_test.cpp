// SFT data with tools: the bundled glaive_toolcall_en_demo (sharegpt with function_call /
// observation turns and a tools string) read through data/dataset_info.json and encoded through
// each template's tool and function formats, against the supervised goldens made from the same
// records by tools/make_template_goldens.py.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "data/conversation.h"
#include "data/dataset_info.h"
#include "data/sft_encode.h"
#include "data/sft_reader.h"

namespace unillm::data::testing {

const nlohmann::json& template_goldens();  // template_test.cpp
const io::Tokenizer& golden_tokenizer(const std::string& key);
Conversation golden_conversation(const nlohmann::json& c);
TemplateOptions golden_options(const nlohmann::json& c);

namespace {

ConversationSet glaive() {
  const auto attrs = resolve_datasets({"glaive_toolcall_en_demo"},
                                      std::string(UNILLM_SOURCE_DIR) + "/data", "sft");
  return read_conversations(attrs.at(0), {});
}

TEST(ToolData, GlaiveDemoReadsToolsAndFunctionCalls) {
  const ConversationSet set = glaive();
  ASSERT_EQ(set.conversations.size(), 50u);
  int with_tools = 0, calls = 0;
  for (const Conversation& c : set.conversations) {
    with_tools += c.tools.size() > 2 ? 1 : 0;  // "[]" is no tool
    for (const Message& m : c.messages) calls += m.role == Role::kFunction ? 1 : 0;
  }
  EXPECT_EQ(with_tools, 29);
  EXPECT_EQ(calls, 36);
  const Conversation& first = set.conversations[0];
  ASSERT_EQ(first.messages.size(), 8u);
  EXPECT_EQ(first.messages[3].role, Role::kFunction);
  EXPECT_EQ(first.messages[4].role, Role::kObservation);
  EXPECT_EQ(first.tools.rfind("[{\"name\": \"search_recipes\"", 0), 0u) << first.tools;
}

TEST(ToolData, GlaiveRecordsEncodeAsGoldens) {
  const ConversationSet set = glaive();
  int checked = 0;
  for (const auto& c : template_goldens()["supervised"]) {
    if (!c.contains("glaive_record")) continue;
    SCOPED_TRACE(c["template"].get<std::string>() + " record " + c["glaive_record"].dump());
    const Conversation& read = set.conversations.at(c["glaive_record"].get<size_t>());
    const Conversation gold = golden_conversation(c);
    ASSERT_EQ(read.messages.size(), gold.messages.size());
    for (size_t k = 0; k < read.messages.size(); ++k) {
      EXPECT_EQ(read.messages[k].role, gold.messages[k].role);
      EXPECT_EQ(read.messages[k].content, gold.messages[k].content);
    }
    EXPECT_EQ(read.tools, gold.tools);
    auto t =
        ChatTemplate::by_name(c["template"], golden_tokenizer(c["tokenizer"]), golden_options(c));
    SupervisedOptions o;
    o.cutoff_len = c["cutoff_len"];
    const SupervisedExample ex = encode_supervised(read, *t, o);
    EXPECT_EQ(ex.input_ids, c["input_ids"].get<std::vector<int32_t>>());
    EXPECT_EQ(ex.labels, c["labels"].get<std::vector<int32_t>>());
    ++checked;
  }
  EXPECT_EQ(checked, 8);
}

TEST(ToolData, EveryGlaiveRecordEncodesWithEveryToolFamily) {
  const ConversationSet set = glaive();
  for (const char* name : {"qwen", "llama3", "mistral", "default", "glm4", "qwen3_5", "seed_oss"}) {
    const char* tk = std::string(name) == "llama3" ? "llama3" : "qwen2";
    if (std::string(name) == "mistral" || std::string(name) == "default") tk = "llama2";
    auto t = ChatTemplate::by_name(name, golden_tokenizer(tk));
    for (const Conversation& c : set.conversations) {
      SCOPED_TRACE(std::string(name) + " " + c.source);
      const SupervisedExample ex = encode_supervised(c, *t, {});
      EXPECT_EQ(ex.input_ids.size(), ex.labels.size());
      EXPECT_FALSE(ex.input_ids.empty());
    }
  }
}

}  // namespace
}  // namespace unillm::data::testing
