// Chat templates against goldens made by tools/make_template_goldens.py (an independent Python
// rendering of LLaMA-Factory's templates on HF tokenizers; tests/data/templates/README.md), plus
// the error cases and the Jinja recognition.
#include "data/template.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "data/conversation.h"
#include "data/error.h"
#include "data_layer/data_test_util.h"
#include "io/json_file.h"

namespace unillm::data::testing {

using nlohmann::json;

// Shared with sft_encode_test.cpp (declared there): the golden file, the tokenizer a golden case
// names, and a case's conversation.
const json& template_goldens() {
  static const json g =
      io::read_json_file(std::string(UNILLM_SOURCE_DIR) + "/tests/data/templates/goldens.json");
  return g;
}

namespace {

// The Qwen2 tokenizer files plus Qwen3's <think>/</think> as added non-special tokens, at the
// ids the goldens name (the generator builds the same directory); "qwen2_extra" also has the
// goldens' extra_tokens as special tokens (the tokens of templates no bundled tokenizer has).
std::unique_ptr<io::Tokenizer> make_think_tokenizer(const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path src = fs::path(UNILLM_SOURCE_DIR) / "tests/data/qwen2-tokenizer";
  ScratchDir dir(name);
  for (const char* f : {"vocab.json", "merges.txt", "special_tokens_map.json"})
    fs::copy_file(src / f, fs::path(dir.path()) / f);
  json cfg = io::read_json_file((src / "tokenizer_config.json").string());
  json added = io::read_json_file((src / "added_tokens.json").string());
  const auto ids = template_goldens()["think_ids"].get<std::vector<int32_t>>();
  std::vector<std::tuple<std::string, int32_t, bool>> news = {{"<think>", ids[0], false},
                                                              {"</think>", ids[1], false}};
  if (name == "qwen2_extra")
    for (const auto& [tok, id] : template_goldens()["extra_tokens"].items())
      news.emplace_back(tok, id.get<int32_t>(), true);
  for (const auto& [tok, id, special] : news) {
    cfg["added_tokens_decoder"][std::to_string(id)] = {
        {"content", tok},  {"lstrip", false},      {"normalized", false},
        {"rstrip", false}, {"single_word", false}, {"special", special}};
    added[tok] = id;
  }
  dir.write("tokenizer_config.json", cfg.dump());
  dir.write("added_tokens.json", added.dump());
  return io::Tokenizer::load(dir.path());
}

}  // namespace

const io::Tokenizer& golden_tokenizer(const std::string& key) {
  static std::map<std::string, std::unique_ptr<io::Tokenizer>> cache;  // test-only, one thread
  auto it = cache.find(key);
  if (it != cache.end()) return *it->second;
  const std::string data = std::string(UNILLM_SOURCE_DIR) + "/tests/data/";
  std::unique_ptr<io::Tokenizer> tok;
  if (key == "qwen2_think" || key == "qwen2_extra")
    tok = make_think_tokenizer(key);
  else
    tok = io::Tokenizer::load(data + key + "-tokenizer");
  return *cache.emplace(key, std::move(tok)).first->second;
}

Conversation golden_conversation(const json& c) {
  static const std::map<std::string, Role> roles = {{"user", Role::kUser},
                                                    {"assistant", Role::kAssistant},
                                                    {"observation", Role::kObservation},
                                                    {"function", Role::kFunction}};
  Conversation conv;
  for (const json& m : c["messages"])
    conv.messages.push_back({roles.at(m["role"].get<std::string>()), m["content"]});
  conv.system = c["system"].get<std::string>();
  conv.tools = c.value("tools", "");
  conv.source = "golden";
  return conv;
}

TemplateOptions golden_options(const json& c) {
  TemplateOptions o;
  if (c.contains("enable_thinking") && c["enable_thinking"].is_null())
    o.enable_thinking = std::nullopt;
  else if (c.contains("enable_thinking"))
    o.enable_thinking = c["enable_thinking"].get<bool>();
  o.preserve_thinking = c.value("preserve_thinking", false);
  o.tool_date = template_goldens()["tool_date"].get<std::string>();
  return o;
}

namespace {

std::string describe(const json& c) {
  std::string s = c["template"].get<std::string>() + " / " + c["tokenizer"].get<std::string>() +
                  " / " + std::to_string(c["messages"].size()) + " messages / system '" +
                  c["system"].get<std::string>() + "'";
  if (c.contains("enable_thinking")) s += " / enable_thinking " + c["enable_thinking"].dump();
  if (c.contains("tools")) s += " / tools";
  if (c.contains("preserve_thinking")) s += " / preserve_thinking";
  if (c.contains("discard_history_thought"))
    s += " / discard " + c["discard_history_thought"].dump();
  return s;
}

TEST(ChatTemplate, MatchesGoldens) {
  int checked = 0, jinja_checked = 0;
  for (const json& c : template_goldens()["templates"]) {
    SCOPED_TRACE(describe(c));
    const io::Tokenizer& tok = golden_tokenizer(c["tokenizer"]);
    auto t = ChatTemplate::by_name(c["template"], tok, golden_options(c));
    const Conversation conv = golden_conversation(c);
    const bool discard = c.value("discard_history_thought", false);
    const auto turns = t->encode_multiturn(conv.messages, conv.system, discard, conv.tools);
    ASSERT_EQ(turns.size(), c["pairs"].size());
    for (size_t k = 0; k < turns.size(); ++k) {
      EXPECT_EQ(turns[k].prompt, c["pairs"][k][0].get<std::vector<int32_t>>()) << "turn " << k;
      EXPECT_EQ(turns[k].response, c["pairs"][k][1].get<std::vector<int32_t>>()) << "turn " << k;
    }
    std::vector<Message> history(conv.messages.begin(), conv.messages.end() - 1);
    EXPECT_EQ(t->encode_prompt(history, conv.system, conv.tools),
              c["prompt"].get<std::vector<int32_t>>());
    EXPECT_EQ(t->eos_id(), c["eos_id"].get<int32_t>());
    EXPECT_EQ(t->stop_ids(), c["stop_ids"].get<std::vector<int32_t>>());
    ++checked;
    jinja_checked += c.value("hf_jinja_checked", false) ? 1 : 0;
  }
  EXPECT_GE(checked, 1025);
  EXPECT_GE(jinja_checked, 5);  // qwen and llama3 cases equal to HF apply_chat_template
}

TEST(ChatTemplate, GoldensCoverEveryBuiltinTemplate) {
  std::set<std::string> covered;
  for (const json& c : template_goldens()["templates"]) covered.insert(c["template"]);
  const json& skipped = template_goldens()["skipped"];  // none: qwen2_extra has every token
  for (const std::string& n : ChatTemplate::names())
    EXPECT_TRUE(covered.count(n) || skipped.contains(n)) << n;
  EXPECT_EQ(ChatTemplate::names().size(), 124u);  // every register_template call of LLaMA-Factory
  EXPECT_TRUE(skipped.empty()) << skipped.dump();
  for (const char* n :
       {"default", "empty", "alpaca", "vicuna", "llama2", "llama3", "qwen", "qwen3"})
    EXPECT_TRUE(find_template_def(n)) << n;
}

TEST(ChatTemplate, AliasesAndVariantsAreRows) {
  for (const char* n : {"qwen3_nothink", "qwen3_vl_nothink", "moss_vl", "qwen3_5", "glm4_7",
                        "deepseek3", "gemma3", "llava", "mistral_small", "openchat-3.6"})
    EXPECT_TRUE(find_template_def(n)) << n;
  EXPECT_EQ(find_template_def("qwen3_nothink")->template_class, TemplateClass::kPlain);
  EXPECT_EQ(find_template_def("qwen3")->template_class, TemplateClass::kReasoning);
  EXPECT_EQ(find_template_def("glm4_7")->template_class, TemplateClass::kGlm47Reasoning);
  EXPECT_EQ(find_template_def("moss_vl")->template_class, TemplateClass::kMossVl);
  EXPECT_EQ(find_template_def("moss_vl")->mm_plugin, "moss_vl");
  // register_template's default: the function format takes the assistant slots as given.
  const TemplateDef* alpaca = find_template_def("alpaca");
  EXPECT_EQ(alpaca->format_function.size(), alpaca->format_assistant.size());
  EXPECT_EQ(alpaca->function_format, "default");
}

TEST(ChatTemplate, LfmTwoRendersToolsAndRefusesBadSchemas) {
  // lfm2's tool prompt lands in the system turn; a tool that is not an object is a DataError.
  auto t = ChatTemplate::by_name("lfm2", golden_tokenizer("qwen2"));
  const std::vector<Message> m = {{Role::kUser, "hi"}, {Role::kAssistant, "yo"}};
  const std::vector<Message> ask = {{Role::kUser, "hi"}};
  const auto plain = t->encode_prompt(ask, "");
  const auto with_tools = t->encode_prompt(ask, "", R"([{"name": "f", "parameters": {}}])");
  EXPECT_GT(with_tools.size(), plain.size());
  EXPECT_THROW(t->encode_multiturn(m, "", false, "[1]"), DataError);
  EXPECT_NO_THROW(t->encode_multiturn(m, "", false, "[]"));  // an empty list renders no tool text
}

TEST(ChatTemplate, LlamaThreeToolPromptNamesTodayByDefault) {
  auto t = ChatTemplate::by_name("llama3", golden_tokenizer("llama3"));
  TemplateOptions o;
  o.tool_date = "01 Jan 2000";
  auto fixed = ChatTemplate::by_name("llama3", golden_tokenizer("llama3"), o);
  const std::vector<Message> m = {{Role::kUser, "hi"}};
  const std::string tools = R"([{"name": "f", "parameters": {}}])";
  EXPECT_NE(t->encode_prompt(m, "", tools), fixed->encode_prompt(m, "", tools));
  EXPECT_EQ(t->encode_prompt(m, ""), fixed->encode_prompt(m, ""));
}

TEST(ChatTemplate, ThinkTokenizerHasSingleThinkTokens) {
  const io::Tokenizer& tok = golden_tokenizer("qwen2_think");
  const auto ids = template_goldens()["think_ids"].get<std::vector<int32_t>>();
  io::EncodeOptions eo;
  eo.add_special_tokens = false;
  EXPECT_EQ(tok.encode("<think>", eo), std::vector<int32_t>{ids[0]});
  EXPECT_EQ(tok.encode("</think>", eo), std::vector<int32_t>{ids[1]});
}

TEST(ChatTemplate, UnknownAndJinjaNamesAreConfigErrors) {
  const io::Tokenizer& tok = golden_tokenizer("qwen2");
  try {
    ChatTemplate::by_name("chatglm9", tok);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("[template] unknown template 'chatglm9'; known: "), std::string::npos) << m;
    EXPECT_NE(m.find("llama3"), std::string::npos) << m;
    EXPECT_NE(m.find("qwen3"), std::string::npos) << m;
  }
  try {
    ChatTemplate::by_name("auto", tok);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("Jinja"), std::string::npos) << m;
    EXPECT_NE(m.find("not supported"), std::string::npos) << m;
    EXPECT_NE(m.find("alpaca"), std::string::npos) << m;
  }
}

TEST(ChatTemplate, MissingTemplateTokenIsConfigError) {
  // llama3 replaces EOS with <|eot_id|>, which the Qwen2 vocabulary lacks.
  try {
    ChatTemplate::by_name("llama3", golden_tokenizer("qwen2"));
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("<|eot_id|>"), std::string::npos) << e.what();
  }
  // A custom template naming a token the tokenizer does not have.
  TemplateDef def = *find_template_def("empty");
  def.format_user = {{TemplateSlot::Kind::kToken, "<no_such_token>"}};
  EXPECT_THROW(ChatTemplate::from_def(def, golden_tokenizer("qwen2")), ConfigError);
}

TEST(ChatTemplate, LlamaThreeSkipsStopWordsTheVocabularyLacks) {
  // <|eom_id|> is a Llama 3.1 token; the Llama 3 vocabulary has <|reserved_special_token_4|> there.
  auto t = ChatTemplate::by_name("llama3", golden_tokenizer("llama3"));
  EXPECT_EQ(t->eos_id(), 128009);
  EXPECT_EQ(t->stop_ids(), std::vector<int32_t>{128009});
  EXPECT_FALSE(t->efficient_eos());
}

TEST(ChatTemplate, MessageShapeErrors) {
  auto t = ChatTemplate::by_name("qwen", golden_tokenizer("qwen2"));
  const Message u{Role::kUser, "hi"}, a{Role::kAssistant, "yo"};
  EXPECT_THROW(t->encode_multiturn({u}, ""), DataError);
  EXPECT_THROW(t->encode_multiturn({}, ""), DataError);
  EXPECT_THROW(t->encode_multiturn({a, u}, ""), DataError);
  EXPECT_THROW(t->encode_multiturn({u, {Role::kSystem, "s"}}, ""), DataError);
  EXPECT_THROW(t->encode_multiturn({u, {Role::kFunction, "{}"}}, ""), DataError);  // no name
  EXPECT_THROW(t->encode_multiturn({u, {Role::kFunction, "not json"}}, ""), DataError);
  EXPECT_THROW(t->encode_multiturn({u, a}, "", false, "[oops"), DataError);
  EXPECT_THROW(t->encode_prompt({u, a}, ""), DataError);
  EXPECT_NO_THROW(t->encode_prompt({u, a, {Role::kObservation, "42"}}, ""));
}

TEST(ChatTemplate, DefaultSystemOverrideAndExplicitSystem) {
  const io::Tokenizer& tok = golden_tokenizer("qwen2");
  TemplateOptions o;
  o.default_system = "Be brief.";
  auto t = ChatTemplate::by_name("qwen", tok, o);
  auto ref = ChatTemplate::by_name("qwen", tok);
  const std::vector<Message> m = {{Role::kUser, "hi"}};
  EXPECT_EQ(t->encode_prompt(m, ""), ref->encode_prompt(m, "Be brief."));
  EXPECT_NE(t->encode_prompt(m, ""), ref->encode_prompt(m, ""));
  EXPECT_EQ(t->encode_prompt(m, "Other."), ref->encode_prompt(m, "Other."));
}

TEST(ChatTemplate, RecognizesJinjaTemplates) {
  json cfg = io::read_json_file(std::string(UNILLM_SOURCE_DIR) +
                                "/tests/data/qwen2-tokenizer/tokenizer_config.json");
  EXPECT_EQ(recognize_jinja_template(cfg["chat_template"].get<std::string>()), "qwen");
  const std::string qwen2_instruct =
      "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
      "'<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif "
      "%}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + "
      "'\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
  EXPECT_EQ(recognize_jinja_template(qwen2_instruct), "qwen");
  const std::string llama3 =
      "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
      "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | "
      "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% "
      "endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
      "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";
  EXPECT_EQ(recognize_jinja_template(llama3), "llama3");
  EXPECT_EQ(recognize_jinja_template("  " + llama3 + "\n"), "llama3");
  EXPECT_EQ(recognize_jinja_template("{{ messages }}"), "");
  EXPECT_EQ(recognize_jinja_template(""), "");
}

}  // namespace
}  // namespace unillm::data::testing
