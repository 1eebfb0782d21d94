// SFT readers: dataset_info.json columns/tags, alpaca and sharegpt conversion (LLaMA-Factory's
// converters), PaddleNLP src/tgt, bad records with file:line, skipping and counting.
#include "data/sft_reader.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "data/error.h"
#include "data/template_tools.h"
#include "data_layer/data_test_util.h"

namespace unillm::data {
namespace {

using testing::ScratchDir;

std::string sft_dir() { return std::string(UNILLM_SOURCE_DIR) + "/tests/data/sft"; }

DatasetAttr attr_of(const std::string& name, const std::string& dir = sft_dir()) {
  return resolve_datasets({name}, dir, "sft").at(0);
}

// "user:…|assistant:…" for compact expectations.
std::string flat(const Conversation& c) {
  static const char* kNames[] = {"user", "assistant", "system", "function", "observation"};
  std::string s;
  for (const auto& m : c.messages) {
    if (!s.empty()) s += "|";
    s += std::string(kNames[static_cast<int>(m.role)]) + ":" + m.content;
  }
  return s;
}

TEST(DatasetInfoSft, DefaultsAreLlamaFactorysAndAColumnsMapReplacesThem) {
  DatasetAttr a = attr_of("alpaca_demo");
  EXPECT_EQ(a.formatting, "alpaca");
  EXPECT_EQ(a.columns.prompt, "instruction");
  EXPECT_EQ(a.columns.query, "input");
  EXPECT_EQ(a.columns.response, "output");
  EXPECT_FALSE(a.columns.history);
  EXPECT_FALSE(a.columns.system);

  DatasetAttr s = attr_of("sharegpt_lf");
  EXPECT_EQ(s.formatting, "sharegpt");
  EXPECT_EQ(s.columns.messages, "conversations");
  EXPECT_EQ(s.columns.system, "system");
  EXPECT_EQ(s.tags.role_tag, "from");
  EXPECT_EQ(s.tags.content_tag, "value");
  EXPECT_EQ(s.tags.user_tag, "human");
  EXPECT_EQ(s.tags.assistant_tag, "gpt");
  EXPECT_EQ(s.tags.observation_tag, "observation");
  EXPECT_EQ(s.tags.function_tag, "function_call");
  EXPECT_EQ(s.tags.system_tag, "system");

  // A tags map sets every tag: the ones it leaves out are gone (LLaMA-Factory's set_attr).
  DatasetAttr o = attr_of("openai_messages");
  EXPECT_EQ(o.columns.messages, "messages");
  EXPECT_EQ(o.tags.role_tag, "role");
  EXPECT_EQ(o.tags.user_tag, "user");
  EXPECT_EQ(o.tags.system_tag, "system");
  EXPECT_FALSE(o.tags.observation_tag);
  EXPECT_FALSE(o.tags.function_tag);
}

TEST(DatasetInfoSft, RejectsWhatStageSftCannotRead) {
  ScratchDir dir("sft_info");
  dir.write("a.json", "[]");
  dir.write("t.txt", "x\n");
  dir.write("dataset_info.json", R"({
    "rank": {"file_name": "a.json", "ranking": true},
    "img": {"file_name": "a.json", "columns": {"prompt": "p", "response": "r", "images": "im"}},
    "oai": {"file_name": "a.json", "formatting": "openai"},
    "odd": {"file_name": "a.json", "formatting": "chatml"},
    "txt": {"file_name": "t.txt"},
    "noresp": {"file_name": "a.json", "columns": {"prompt": "p"}},
    "badtag": {"file_name": "a.json", "formatting": "sharegpt", "tags": {"role_tag": 3}}})");
  auto err = [&](const std::string& name) {
    try {
      resolve_datasets({name}, dir.path(), "sft");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(err("rank").find("not applicable to stage sft"), std::string::npos);
  EXPECT_NE(err("img").find("column 'images' is not implemented"), std::string::npos);
  EXPECT_EQ(err("oai"), "");  // openai: sharegpt's columns and tags (LLaMA-Factory's defaults)
  EXPECT_NE(err("odd").find("unknown formatting 'chatml'"), std::string::npos);
  EXPECT_NE(err("txt").find("stage sft reads .json or .jsonl"), std::string::npos);
  EXPECT_NE(err("noresp").find("has no 'response'"), std::string::npos);
  EXPECT_NE(err("badtag").find("'tags.role_tag' must be a string"), std::string::npos);
  // Stage pt keeps its own rules: sharegpt is not implemented there.
  dir.write("dataset_info.json", R"({"s": {"file_name": "a.json", "formatting": "sharegpt"}})");
  EXPECT_THROW(resolve_datasets({"s"}, dir.path()), NotImplemented);
}

TEST(SftReader, AlpacaDemoSubsetJoinsInstructionAndInput) {
  DatasetAttr a = attr_of("alpaca_demo");
  ConversationSet set = read_conversations(a, {});
  ASSERT_EQ(set.conversations.size(), 367u);
  EXPECT_EQ(set.rows, 367);
  const Conversation& first = set.conversations[0];
  ASSERT_EQ(first.messages.size(), 2u);
  EXPECT_EQ(first.messages[0].content, "Describe a process of making crepes.");  // input ""
  EXPECT_EQ(first.messages[1].role, Role::kAssistant);
  EXPECT_EQ(first.messages[1].content.rfind("Making crepes is an easy", 0), 0u);
  EXPECT_EQ(first.system, "");
  // Record 6 (index 5) has an input; records are 5 lines each from line 2.
  const Conversation& tri = set.conversations[5];
  EXPECT_EQ(tri.messages[0].content,
            "Given the parameters of a triangle, find out its perimeter.\n"
            "Side 1 = 4\nSide 2 = 6\nSide 3 = 8");
  EXPECT_EQ(tri.source, a.files[0] + " line 27");
  ReadOptions ro;
  ro.max_samples = 4;
  EXPECT_EQ(read_conversations(a, ro).conversations.size(), 4u);
}

TEST(SftReader, AlpacaHistoryAndSystemColumns) {
  ConversationSet set = read_conversations(attr_of("alpaca_history"), {});
  ASSERT_EQ(set.conversations.size(), 3u);
  EXPECT_EQ(flat(set.conversations[0]),
            "user:Say hello.|assistant:Hello.|user:In German?|assistant:Hallo.|"
            "user:And in French?|assistant:Bonjour.");
  EXPECT_EQ(set.conversations[0].system, "You translate.");
  EXPECT_EQ(flat(set.conversations[1]), "user:Add the numbers.\n2 and 3|assistant:5");
  EXPECT_EQ(set.conversations[1].system, "");
  EXPECT_EQ(flat(set.conversations[2]), "user:only the input|assistant:ok");
  EXPECT_EQ(set.conversations[2].source, attr_of("alpaca_history").files[0] + " line 4");
}

TEST(SftReader, SharegptLlamaFactoryLayout) {
  DatasetAttr a = attr_of("sharegpt_lf");
  ConversationSet set = read_conversations(a, {});
  ASSERT_EQ(set.conversations.size(), 3u);
  EXPECT_EQ(flat(set.conversations[0]), "user:Hi, who are you?|assistant:I am a small test model.");
  EXPECT_EQ(set.conversations[0].system, "Be brief.");  // the system column
  EXPECT_EQ(set.conversations[0].source, a.files[0] + " line 2");
  // A leading system turn is taken out as the system (and wins over the column).
  EXPECT_EQ(set.conversations[1].system, "You can call tools.");
  EXPECT_EQ(flat(set.conversations[1]),
            "user:Weather in Paris?|"
            "function:{\"name\": \"weather\", \"arguments\": {\"city\": \"Paris\"}}|"
            "observation:{\"temp\": 21}|assistant:It is 21 degrees in Paris.");
  EXPECT_EQ(set.conversations[1].source, a.files[0] + " line 9");
  EXPECT_EQ(flat(set.conversations[2]), "user:One.|assistant:Two.|user:Three.|assistant:Four.");
  EXPECT_EQ(set.conversations[2].source, a.files[0] + " line 19");
}

TEST(SftReader, SharegptWithOpenAiTags) {
  ConversationSet set = read_conversations(attr_of("openai_messages"), {});
  ASSERT_EQ(set.conversations.size(), 2u);
  EXPECT_EQ(set.conversations[0].system, "You are terse.");
  EXPECT_EQ(flat(set.conversations[0]), "user:2+2?|assistant:4");
  EXPECT_EQ(flat(set.conversations[1]),
            "user:Name a colour.|assistant:Blue.|user:Another.|assistant:Red.");
}

// A scratch dataset dir with one sharegpt (default tags) and one alpaca file of bad records.
class BadRecords : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_.write("dataset_info.json",
               R"({"sg": {"file_name": "sg.jsonl", "formatting": "sharegpt"},
                   "al": {"file_name": "al.json", "columns": {"prompt": "instruction",
                          "query": "input", "response": "output", "history": "history",
                          "tools": "tools"}}})");
    const std::string h = R"({"from": "human", "value": "q"})";
    const std::string g = R"({"from": "gpt", "value": "a"})";
    const std::string s = R"({"from": "system", "value": "sys"})";
    sg_ = dir_.write("sg.jsonl",
                     "{\"conversations\": [" + h + ", " + g +
                         "]}\n"  // 1 ok
                         "{\"conversations\": [" +
                         s + ", " + h + ", " + h +
                         "]}\n"  // 2 role
                         "{\"conversations\": [" +
                         g + ", " + h +
                         "]}\n"  // 3 role
                         "{\"conversations\": [" +
                         h + ", " + g + ", " + h +
                         "]}\n"               // 4 odd
                         "{\"convs\": []}\n"  // 5 missing
                         "\n"
                         "{\"conversations\": [" +
                         h +
                         ", {\"from\": \"gpt\", \"value\": \"\"}]}\n"  // 7
                         "{\"conversations\": [" +
                         h +
                         ", {\"from\": \"gpt\"}]}\n"  // 8 no value
                         "{\"conversations\": [" +
                         s +
                         "]}\n"  // 9 no turns
                         "{\"conversations\": [" +
                         h + ", " + g +
                         "]\n"       // 10 JSON
                         "[1, 2]\n"  // 11 array
                         "{\"conversations\": [" +
                         h + ", " + g + "]}\n");  // 12 ok
    al_ = dir_.write("al.json",
                     "[\n"
                     "  {\"instruction\": \"i\", \"output\": \"o\"},\n"  // 2 ok
                     "  {\"instruction\": \"i\"},\n"                     // 3
                     "  {\"instruction\": \"i\", \"output\": null},\n"   // 4
                     "  {\"instruction\": \"i\",\n   \"output\": 7},\n"  // 5
                     "  {\"instruction\": \"i\", \"output\": \"o\", \"history\": [[\"a\"]]},\n"
                     "  {\"output\": \"o\"},\n"                         // 8
                     "  {\"instruction\": \"i\", \"output\": \"\"},\n"  // 9
                     "  {\"instruction\": \"i\", \"output\": \"o\", \"tools\": \"[{\"},\n"
                     "  {\"instruction\": [\"i\"], \"output\": \"o\"},\n"                // 11
                     "  {\"instruction\": \"i\", \"output\": \"o\", \"tools\": \"\"}\n"  // 12 ok
                     "]\n");
  }

  std::string error_of(const std::string& name, ReadOptions ro = {}) {
    try {
      read_conversations(attr_of(name, dir_.path()), ro);
    } catch (const DataError& e) {
      return e.what();
    }
    return "";
  }

  ScratchDir dir_{"sft_bad"};
  std::string sg_, al_;
};

TEST_F(BadRecords, SharegptErrorsNameFileLineAndTurn) {
  EXPECT_EQ(
      error_of("sg"),
      "[data] " + sg_ + " line 2: sharegpt turn 3 has role 'human', expected an assistant turn");
  ReadOptions ro;
  ro.skip_bad_records = true;
  ConversationSet set = read_conversations(attr_of("sg", dir_.path()), ro);
  EXPECT_EQ(set.conversations.size(), 2u);
  EXPECT_EQ(set.skipped_records, 9);
  EXPECT_EQ(set.rows, 11);  // records read, bad ones included; the blank line is no record
  EXPECT_EQ(set.conversations[1].source, sg_ + " line 12");
  ASSERT_EQ(set.skip_messages.size(), 5u);  // the first five reasons
  const std::string p = "[data] " + sg_;
  EXPECT_EQ(set.skip_messages[1],
            p + " line 3: sharegpt turn 1 has role 'gpt', expected a user turn");
  EXPECT_EQ(set.skip_messages[2],
            p + " line 4: sharegpt conversation has 3 turns, expected an even number ending with "
                "an assistant turn");
  EXPECT_EQ(set.skip_messages[3], p + " line 5: key 'conversations' missing");
  EXPECT_EQ(set.skip_messages[4], p + " line 7: sharegpt turn 2 is empty (no response)");
  // The ones after the first five, one at a time: make each the first bad record.
  dir_.write("sg.jsonl",
             "{\"conversations\": [{\"from\": \"human\", \"value\": \"q\"}, "
             "{\"from\": \"gpt\"}]}\n");
  EXPECT_EQ(error_of("sg"), "[data] " + sg_ + " line 1: sharegpt turn 2: key 'value' missing");
  dir_.write("sg.jsonl", "{\"conversations\": [{\"from\": \"system\", \"value\": \"s\"}]}\n");
  EXPECT_EQ(error_of("sg"), "[data] " + sg_ + " line 1: sharegpt conversation has no turns");
  dir_.write("sg.jsonl", "\n\n{\"conversations\": [}\n");
  EXPECT_EQ(error_of("sg"), "[data] " + sg_ + " line 3: invalid JSON");
  dir_.write("sg.jsonl", "[1, 2]\n");  // a JSON array file whose records are not objects
  EXPECT_EQ(error_of("sg"), "[data] " + sg_ + " line 1: expected a JSON object (got number)");
  dir_.write("sg.jsonl", "");
  EXPECT_EQ(error_of("sg"), "[data] " + sg_ + ": empty file (no records)");
}

TEST_F(BadRecords, AlpacaErrorsNameTheLineWhereTheObjectStarts) {
  ReadOptions ro;
  ro.skip_bad_records = true;
  ConversationSet set = read_conversations(attr_of("al", dir_.path()), ro);
  EXPECT_EQ(set.conversations.size(), 2u);
  EXPECT_EQ(set.skipped_records, 8);
  EXPECT_EQ(set.conversations[1].source, al_ + " line 12");
  const std::string p = "[data] " + al_;
  EXPECT_EQ(set.skip_messages[0], p + " line 3: key 'output' missing");
  EXPECT_EQ(set.skip_messages[1], p + " line 4: key 'output' is null (no response to train on)");
  EXPECT_EQ(set.skip_messages[2], p + " line 5: key 'output' is not a string (got number)");
  EXPECT_EQ(set.skip_messages[3],
            p + " line 7: key 'history' item 1 is not a [user, assistant] pair of strings");
  EXPECT_EQ(set.skip_messages[4], p + " line 8: key 'instruction' missing");
  EXPECT_EQ(error_of("al"), p + " line 3: key 'output' missing");
  ro.skip_bad_records = false;
  ro.max_samples = 1;  // stops before the first bad record
  EXPECT_EQ(read_conversations(attr_of("al", dir_.path()), ro).conversations.size(), 1u);
  dir_.write("al.json", "[\n {\"instruction\": \"i\", \"output\": \"o\"},\n {\"output\": \"\"]\n");
  EXPECT_EQ(error_of("al"), p + " line 3: invalid JSON array: mismatched ']'");
  dir_.write("al.json", "[\n {\"instruction\": \"i\", \"output\": \"o\"},\n\n");
  EXPECT_EQ(error_of("al"), p + " line 1: invalid JSON array: no closing ']'");
  dir_.write("al.json", "[\n {\"instruction\": \"i\", \"output\": \"o\"},\n ,]\n");
  EXPECT_EQ(error_of("al"), p + " line 3: invalid JSON array: empty element");
  dir_.write("al.json", "[{\"instruction\": \"i\", \"output\": \"o\"}]\n\n]\n");
  EXPECT_EQ(error_of("al"), p + " line 3: invalid JSON array: text after the closing ']'");
}

TEST_F(BadRecords, AlpacaEmptyResponseToolsAndTypes) {
  ReadOptions ro;
  ro.skip_bad_records = true;
  ConversationSet set = read_conversations(attr_of("al", dir_.path()), ro);
  const std::string p = "[data] " + al_;
  ASSERT_EQ(set.skip_messages.size(), 5u);
  // Make the later ones first by cutting the file.
  dir_.write("al.json", "[{\"instruction\": \"i\", \"output\": \"\"}]");
  EXPECT_EQ(error_of("al"), p + " line 1: key 'output' is empty (no response)");
  dir_.write("al.json", "[{\"instruction\": \"i\", \"output\": \"o\", \"tools\": \"[{\"}]");
  EXPECT_EQ(error_of("al"), p + " line 1: key 'tools' is not valid JSON");
  dir_.write("al.json", "[{\"instruction\": \"i\", \"output\": \"o\", \"tools\": 3}]");
  EXPECT_EQ(error_of("al"),
            p + " line 1: key 'tools' is not a string or a list of tool schemas (got number)");
  dir_.write("al.json", "[{\"instruction\": [\"i\"], \"output\": \"o\"}]");
  EXPECT_EQ(error_of("al"), p + " line 1: key 'instruction' is not a string (got array)");
}

TEST(SrcTgtReader, PaddleDirectoryWithTrainAndDev) {
  SrcTgtData d = read_src_tgt(sft_dir() + "/paddle", {});
  ASSERT_TRUE(d.has_dev);
  ASSERT_EQ(d.train.conversations.size(), 2u);
  EXPECT_EQ(flat(d.train.conversations[0]), "user:Translate to French: cat|assistant:chat");
  EXPECT_EQ(flat(d.train.conversations[1]),
            "user:Hi.|assistant:Hello!|user:How are you?|assistant:Fine, thanks.");
  EXPECT_EQ(d.train.conversations[1].system, "");
  EXPECT_EQ(d.train.conversations[1].source, sft_dir() + "/paddle/train.json line 2");
  ASSERT_EQ(d.dev.conversations.size(), 1u);
  EXPECT_EQ(flat(d.dev.conversations[0]), "user:Translate to French: dog|assistant:chien");
  // One file is the training data; no dev.
  SrcTgtData f = read_src_tgt(sft_dir() + "/paddle/dev.json", {});
  EXPECT_FALSE(f.has_dev);
  EXPECT_EQ(f.train.conversations.size(), 1u);
  EXPECT_THROW(read_src_tgt(sft_dir(), {}), ConfigError);  // no train.json there
}

TEST(SrcTgtReader, BadRecordsNameFileAndLine) {
  ScratchDir dir("srctgt_bad");
  const std::string f = dir.write("train.json",
                                  "{\"src\": \"a\", \"tgt\": \"b\"}\n"
                                  "{\"src\": \"a\"}\n"
                                  "{\"src\": \"a\", \"tgt\": \"\"}\n"
                                  "{\"src\": [\"a\", \"b\"], \"tgt\": [\"c\"]}\n"
                                  "{\"src\": [\"a\", \"b\"], \"tgt\": [\"c\", \"\"]}\n"
                                  "{\"src\": [], \"tgt\": []}\n"
                                  "{\"tgt\": \"b\"}\n");
  try {
    read_src_tgt(dir.path(), {});
    FAIL();
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()), "[data] " + f + " line 2: key 'tgt' missing");
  }
  ReadOptions ro;
  ro.skip_bad_records = true;
  SrcTgtData d = read_src_tgt(dir.path(), ro);
  EXPECT_FALSE(d.has_dev);
  EXPECT_EQ(d.train.conversations.size(), 1u);
  EXPECT_EQ(d.train.skipped_records, 6);
  const std::string p = "[data] " + f;
  EXPECT_EQ(d.train.skip_messages[1], p + " line 3: key 'tgt' is empty");
  EXPECT_EQ(d.train.skip_messages[2], p + " line 4: 'src' has 2 rounds but 'tgt' has 1");
  EXPECT_EQ(d.train.skip_messages[3], p + " line 5: key 'tgt' round 2 is empty");
  EXPECT_EQ(d.train.skip_messages[4],
            p + " line 6: key 'src' is not a string or a non-empty list of strings (got an empty "
                "list)");
}

// formatting: openai as LLaMA-Factory's OpenAIDatasetConverter aligns it: tool_calls become one
// function turn (json.dumps of the function objects), consecutive tool results one observation
// turn, and the system prompt follows its "detailed thinking off" rule (set when empty without
// tools, appended unless present, a trailing "\n" with tools). Expected texts worked out from
// its source (src/llamafactory/data/converter.py).
TEST(SftReader, OpenAiToolCallsToolResultsAndSystemRule) {
  ConversationSet set = read_conversations(attr_of("openai_tools"), {});
  ASSERT_EQ(set.conversations.size(), 5u);
  const Conversation& c = set.conversations[0];
  EXPECT_EQ(flat(c),
            "user:Weather and time in Paris?|"
            R"(function:[{"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}, )"
            R"({"name": "get_time", "arguments": "{}"}]|)"
            "observation:21 C\n</tool_response>\n<tool_response>\n12:00|assistant:It is 21 C at noon.");
  EXPECT_EQ(c.system, "You can call tools.\n");
  EXPECT_NE(c.tools.find("get_weather"), std::string::npos);
  EXPECT_EQ(set.conversations[1].system, "detailed thinking off");
  EXPECT_EQ(set.conversations[2].system, "Be brief.\ndetailed thinking off");
  EXPECT_EQ(set.conversations[3].system, "detailed thinking on");
  EXPECT_EQ(set.conversations[4].system, "");  // tools: [] is a tools value there (json.dumps → "[]")
  // The function turn parses back into the calls the templates render.
  const auto calls = parse_function_message(c.messages[1].content, "test");
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].name, "get_weather");
  EXPECT_EQ(calls[0].arguments, R"("{\"city\": \"Paris\"}")");  // a string, dumped again as there
}

TEST(SftReader, OpenAiRecordsThatCannotBeAlignedAreRefusedOrSkipped) {
  const DatasetAttr a = attr_of("openai_bad");
  const char* faults[] = {"openai message 3: tool results after the last turn",
                          "openai turn 2 (after merging tool results) is not an assistant turn",
                          "openai message 2: key 'content' is not a string (got null)",
                          "openai message 2: tool_calls item 1 has no 'function' object",
                          "openai message 2 has role 'robot', which none of the dataset's tags names",
                          "openai turn 2 (after merging tool results) is not an assistant turn"};
  ReadOptions ro;
  ro.skip_bad_records = true;
  ConversationSet set = read_conversations(a, ro);
  EXPECT_EQ(set.conversations.size(), 0u);
  EXPECT_EQ(set.skipped_records, 6);
  for (size_t i = 0; i < 5; ++i)  // the first five reasons are kept
    EXPECT_NE(set.skip_messages.at(i).find("openai_bad.jsonl line " + std::to_string(i + 1) + ": " + faults[i]),
              std::string::npos) << set.skip_messages[i];
  try {
    read_conversations(a, {});
    ADD_FAILURE() << "no error";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(faults[0]), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace unillm::data
