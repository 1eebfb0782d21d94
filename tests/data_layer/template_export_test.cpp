// A template exported as LLaMA-Factory does (data/template_export.h): the Jinja chat_template,
// rendered by unillm's Jinja renderer (itself byte-identical to transformers' jinja2 renderer,
// tests/reference/jinja_check.py), gives exactly the text of the template's own encoding; the
// Ollama Modelfile carries the same slots and the stop tokens.
#include "data/template_export.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "data/template.h"
#include "io/jinja/jinja.h"
#include "io/tokenizer.h"

namespace unillm::data {
namespace {

std::unique_ptr<io::Tokenizer> tokenizer(const std::string& name) {
  return io::Tokenizer::load(std::string(UNILLM_SOURCE_DIR) + "/tests/data/" + name + "-tokenizer");
}

// The Jinja render of {system?, user, assistant, user, assistant} equals the decoded ids of
// encode_multiturn (byte-level BPE tokenizers decode to the exact text).
void expect_round_trip(const std::string& name, const io::Tokenizer& tok, bool with_system) {
  auto t = ChatTemplate::by_name(name, tok);
  const auto jinja = jinja_chat_template(*t, tok);
  ASSERT_TRUE(jinja.has_value()) << name;
  const std::vector<Message> msgs = {{Role::kUser, "Hi there, what's 2+2?"},
                                     {Role::kAssistant, "It's 4."},
                                     {Role::kUser, "And 'quoted' text?"},
                                     {Role::kAssistant, "Sure."}};
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  if (with_system) messages.push_back({{"role", "system"}, {"content", "Be brief."}});
  for (const auto& m : msgs)
    messages.push_back({{"role", m.role == Role::kUser ? "user" : "assistant"}, {"content", m.content}});
  const std::string rendered = jinja::parse(*jinja, name).render(nlohmann::ordered_json{{"messages", messages}});
  std::vector<int32_t> ids;
  for (const auto& turn : t->encode_multiturn(msgs, with_system ? "Be brief." : "")) {
    ids.insert(ids.end(), turn.prompt.begin(), turn.prompt.end());
    ids.insert(ids.end(), turn.response.begin(), turn.response.end());
  }
  EXPECT_EQ(rendered, tok.decode(ids, false)) << name << (with_system ? " with system" : "") << "\n" << *jinja;
}

TEST(TemplateExport, JinjaRendersWhatTheTemplateEncodes) {
  const auto qwen2 = tokenizer("qwen2"), llama3 = tokenizer("llama3");
  for (const char* name : {"qwen", "chatml", "alpaca", "vicuna", "default", "empty", "qwen3_nothink"})
    for (bool system : {false, true}) expect_round_trip(name, *qwen2, system);
  for (bool system : {false, true}) expect_round_trip("llama3", *llama3, system);
  // Llama2Template: the system text is glued into the first user message.
  for (bool system : {false, true}) expect_round_trip("llama2", *qwen2, system);
}

TEST(TemplateExport, ModelfileHasTheSlotsAndStops) {
  const auto qwen2 = tokenizer("qwen2");
  auto t = ChatTemplate::by_name("qwen", *qwen2);
  const std::string m = ollama_modelfile(*t, *qwen2);
  EXPECT_NE(m.find("FROM .\n"), std::string::npos) << m;
  EXPECT_NE(m.find("TEMPLATE \"\"\"{{ if .System }}<|im_start|>system\n{{ .System }}<|im_end|>\n{{ end }}"
                   "{{ range .Messages }}{{ if eq .Role \"user\" }}<|im_start|>user\n{{ .Content }}<|im_end|>\n"
                   "<|im_start|>assistant\n{{ else if eq .Role \"assistant\" }}{{ .Content }}<|im_end|>\n"
                   "{{ end }}{{ end }}\"\"\""),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("SYSTEM \"\"\""), std::string::npos) << m;
  EXPECT_NE(m.find("PARAMETER stop \"<|im_end|>\"\n"), std::string::npos) << m;
  EXPECT_NE(m.find("PARAMETER num_ctx 4096\n"), std::string::npos) << m;
  EXPECT_TRUE(replaces_jinja_template("alpaca"));
  EXPECT_FALSE(replaces_jinja_template("qwen"));
}

}  // namespace
}  // namespace unillm::data
