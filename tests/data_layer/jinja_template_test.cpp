// data::JinjaChatTemplate: turn splitting (prefix rendering, a merge across a boundary), the
// transformers context (special tokens, tools, messages), choose_template's "jinja", and the
// error cases. Token-exactness against transformers itself is tests/reference/jinja_chat_check.py.
#include "data/jinja_template.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/error.h"
#include "data/sft.h"
#include "data_test_util.h"

namespace unillm::data {
namespace {

using testing::ScratchDir;
using ojson = nlohmann::ordered_json;

const io::Tokenizer& qwen2() {
  static std::unique_ptr<io::Tokenizer> tok =
      io::Tokenizer::load(std::string(UNILLM_SOURCE_DIR) + "/tests/data/qwen2-tokenizer");
  return *tok;
}

// A ChatML-like template without a default system prompt.
const char* kChatml =
    "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

std::unique_ptr<JinjaChatTemplate> make(const std::string& source, ojson specials = ojson::object(),
                                        TemplateOptions o = {}) {
  return std::make_unique<JinjaChatTemplate>(source, std::move(specials), qwen2(), o, "test.jinja");
}

std::vector<int32_t> encode(const std::string& text) {
  io::EncodeOptions o;
  o.add_special_tokens = false;
  o.parse_special = true;
  return qwen2().encode(text, o);
}

const std::vector<Message> kTwoTurns = {{Role::kUser, "Hi"},
                                        {Role::kAssistant, "Hello!"},
                                        {Role::kUser, "2+2?"},
                                        {Role::kAssistant, "4"}};

TEST(JinjaTemplate, TurnsSplitTheWholeRenderingAtEachPrompt) {
  auto t = make(kChatml);
  const auto turns = t->encode_multiturn(kTwoTurns, "Be brief.");
  ASSERT_EQ(turns.size(), 2u);
  EXPECT_EQ(turns[0].prompt, encode("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi"
                                    "<|im_end|>\n<|im_start|>assistant\n"));
  EXPECT_EQ(turns[0].response, encode("Hello!<|im_end|>\n"));
  EXPECT_EQ(turns[1].prompt, encode("<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"));
  EXPECT_EQ(turns[1].response, encode("4<|im_end|>\n"));
  std::vector<int32_t> all;
  for (const auto& turn : turns) {
    all.insert(all.end(), turn.prompt.begin(), turn.prompt.end());
    all.insert(all.end(), turn.response.begin(), turn.response.end());
  }
  EXPECT_EQ(all, encode(t->render(kTwoTurns, "Be brief.", "", false)));
  // The prompt for the next turn is the rendering with the generation prompt.
  const std::vector<Message> ask(kTwoTurns.begin(), kTwoTurns.begin() + 3);
  EXPECT_EQ(t->encode_prompt(ask, ""), encode(t->render(ask, "", "", true)));
  const EncodedTurn one = t->encode_oneturn(kTwoTurns, "Be brief.");
  EXPECT_EQ(one.response, turns[1].response);
  EXPECT_EQ(one.prompt.size() + one.response.size(), all.size());
}

TEST(JinjaTemplate, AMergeAcrossTheBoundaryGoesToTheResponse) {
  // "ASSISTANT: " + "Sure" tokenises as "ASSISTANT:" + " Sure": the pieces apart would differ.
  auto t = make(
      "{% for m in messages %}{{ m.role|upper }}: {{ m.content }}\n{% endfor %}"
      "{% if add_generation_prompt %}ASSISTANT: {% endif %}");
  const std::vector<Message> m = {{Role::kUser, "Go"}, {Role::kAssistant, "Sure thing"}};
  const std::string whole = "USER: Go\nASSISTANT: Sure thing\n";
  ASSERT_EQ(t->render(m, "", "", false), whole);
  const auto turns = t->encode_multiturn(m, "");
  ASSERT_EQ(turns.size(), 1u);
  std::vector<int32_t> all = turns[0].prompt;
  all.insert(all.end(), turns[0].response.begin(), turns[0].response.end());
  EXPECT_EQ(all, encode(whole));
  EXPECT_EQ(qwen2().decode(turns[0].prompt), "USER: Go\nASSISTANT:");
  EXPECT_EQ(qwen2().decode(turns[0].response), " Sure thing\n");
}

TEST(JinjaTemplate, ContextHasSpecialTokensToolsAndThinking) {
  ojson specials = {{"bos_token", "<s>"}, {"eos_token", "<|im_end|>"}};
  TemplateOptions o;
  o.enable_thinking = false;
  auto t = make(
      "{{ bos_token }}|{{ eos_token }}|{{ tools|tojson }}|{{ documents }}|"
      "{{ enable_thinking }}|{% for m in messages %}{{ m|tojson }};{% endfor %}",
      specials, o);
  const std::vector<Message> m = {{Role::kUser, "w?"},
                                  {Role::kFunction, R"({"name": "f", "arguments": {"x": 1}})"},
                                  {Role::kObservation, "42"}};
  const std::string tools = R"([{"name": "f", "description": "d", "parameters": {}},
                                {"type": "function", "function": {"name": "g"}}])";
  EXPECT_EQ(
      t->render(m, "sys", tools, true),
      "<s>|<|im_end|>|[{\"type\": \"function\", \"function\": {\"name\": \"f\", "
      "\"description\": \"d\", \"parameters\": {}}}, {\"type\": \"function\", \"function\": "
      "{\"name\": \"g\"}}]|None|False|{\"role\": \"system\", \"content\": \"sys\"};"
      "{\"role\": \"user\", \"content\": \"w?\"};{\"role\": \"assistant\", \"content\": \"\", "
      "\"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", "
      "\"arguments\": {\"x\": 1}}}]};{\"role\": \"tool\", \"content\": \"42\"};");
  // No tools: `tools` is None (defined), as apply_chat_template passes it.
  EXPECT_EQ(
      make("{{ tools is defined }}{{ tools is none }}")->render({{Role::kUser, "x"}}, "", "", true),
      "TrueTrue");
}

TEST(JinjaTemplate, LoadReadsSpecialTokensAsTransformersDoes) {
  ScratchDir dir("jinja_load");
  ojson cfg = {
      {"chat_template",
       ojson::array(
           {{{"name", "tool_use"}, {"template", "T"}},
            {{"name", "default"},
             {"template",
              "{{ bos_token }}{{ eos_token }}{{ pad_token }}{{ additional_special_tokens }}"}}})},
      {"bos_token", "<a>"},
      {"eos_token", {{"content", "<|im_end|>"}, {"special", true}}},
      {"pad_token", nullptr},
      {"additional_special_tokens", {"<x>"}}};
  dir.write("tokenizer_config.json", cfg.dump());
  dir.write("special_tokens_map.json", R"({"bos_token": "<b>"})");
  auto t = JinjaChatTemplate::load(dir.path(), qwen2());
  EXPECT_EQ(t->render({{Role::kUser, "x"}}, "", "", true), "<b><|im_end|>['<x>']");
  EXPECT_EQ(t->name(), "jinja");
  EXPECT_EQ(t->stop_ids(), qwen2().stop_ids());
}

TEST(JinjaTemplate, ChooseTemplateFallsBackToTheJinja) {
  ScratchDir dir("jinja_choose");
  for (const char* f : {"vocab.json", "merges.txt"})
    std::filesystem::copy_file(std::string(UNILLM_SOURCE_DIR) + "/tests/data/qwen2-tokenizer/" + f,
                               dir.path() + "/" + f);
  dir.write("tokenizer_config.json",
            ojson{{"chat_template", kChatml}, {"eos_token", "<|im_end|>"}}.dump());
  const TemplateChoice c = choose_template("", dir.path());
  EXPECT_EQ(c.name, kJinjaTemplateName);
  EXPECT_EQ(c.model_dir, dir.path());
  auto t = make_chat_template(c, qwen2(), c.options);
  EXPECT_EQ(t->encode_prompt({{Role::kUser, "Hi"}}, ""),
            encode("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"));
  EXPECT_EQ(choose_template("jinja", dir.path()).name, "jinja");
  EXPECT_EQ(choose_template("qwen", dir.path()).name, "qwen");
  // The bundled Qwen2 Jinja still maps to its row; "jinja" forces the Jinja itself.
  const std::string q = std::string(UNILLM_SOURCE_DIR) + "/tests/data/qwen2-tokenizer";
  EXPECT_EQ(choose_template("", q).name, "qwen");
  EXPECT_EQ(choose_template("jinja", q).name, "jinja");
  ScratchDir none("jinja_none");
  EXPECT_THROW(choose_template("jinja", none.path()), ConfigError);
  EXPECT_EQ(choose_template("", none.path()).name, "empty");
}

TEST(JinjaTemplate, HistoryRewritesAreRefusedNamingTheTurn) {
  // Earlier assistant turns lose their thoughts once a later user turn exists.
  auto strips = make(
      "{% for m in messages %}{% if m.role == 'assistant' and not loop.last %}"
      "{{ m.content.split('</think>')[-1] }}{% else %}{{ m.content }}{% endif %}|{% endfor %}");
  const std::vector<Message> m = {{Role::kUser, "q1"},
                                  {Role::kAssistant, "<think>x</think>a1"},
                                  {Role::kUser, "q2"},
                                  {Role::kAssistant, "a2"}};
  try {
    strips->encode_multiturn(m, "");
    FAIL() << "expected a DataError";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("test.jinja: turn 2"), std::string::npos) << e.what();
  }
  // The generation prompt is not how the reply starts.
  auto thinks = make(
      "{% for m in messages %}{{ m.content }}|{% endfor %}"
      "{% if add_generation_prompt %}<think>{% endif %}");
  EXPECT_THROW(thinks->encode_multiturn({{Role::kUser, "q"}, {Role::kAssistant, "a"}}, ""),
               DataError);
}

TEST(JinjaTemplate, BadInputGivesClearErrors) {
  auto t = make(kChatml);
  EXPECT_THROW(t->encode_multiturn({{Role::kUser, "q"}}, ""), DataError);
  EXPECT_THROW(t->encode_multiturn({{Role::kAssistant, "a"}, {Role::kUser, "q"}}, ""), DataError);
  EXPECT_THROW(t->encode_prompt({{Role::kUser, "q"}, {Role::kAssistant, "a"}}, ""), DataError);
  EXPECT_THROW(
      t->encode_prompt(
          {{Role::kUser, "q"}, {Role::kFunction, "not json"}, {Role::kObservation, "r"}}, ""),
      DataError);
  EXPECT_THROW(t->encode_prompt({{Role::kUser, "q"}}, "", "{\"not\": \"a list\"}"), DataError);
  // raise_exception in the template: a DataError naming the template.
  auto raises = make("{{ raise_exception('no system prompts') if messages[0].role == 'system' }}");
  try {
    raises->encode_prompt({{Role::kUser, "q"}}, "sys");
    FAIL() << "expected a DataError";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("no system prompts"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("test.jinja"), std::string::npos) << e.what();
  }
  EXPECT_THROW(make("{% for %}"), ConfigError);  // does not parse
  TemplateOptions o;
  o.tool_format = "qwen";
  EXPECT_THROW(make(kChatml, ojson::object(), o), ConfigError);
  ScratchDir dir("jinja_bad");
  dir.write("tokenizer_config.json", R"({"chat_template": 3})");
  EXPECT_THROW(JinjaChatTemplate::load(dir.path(), qwen2()), ConfigError);
}

TEST(JinjaTemplate, ToolFormatForRepliesIsGuessedFromTheSource) {
  EXPECT_EQ(make("{{ '<tool_call>' }}")->def().tool_format, "qwen");
  EXPECT_EQ(make("{{ '[TOOL_CALLS]' }}")->def().tool_format, "mistral");
  EXPECT_EQ(make(kChatml)->def().tool_format, "default");
}

}  // namespace
}  // namespace unillm::data
