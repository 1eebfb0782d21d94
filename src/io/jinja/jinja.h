// Jinja renderer for Hugging Face chat templates (issue 18): parse once, render many times with
// the same settings transformers 4.46 uses (trim_blocks, lstrip_blocks, loopcontrols, its tojson,
// raise_exception and strftime_now, the {% generation %} tag, an immutable sandbox).
//
//   auto t = unillm::jinja::parse(tokenizer_config["chat_template"], "tokenizer_config.json");
//   std::string prompt = t.render({{"messages", msgs}, {"add_generation_prompt", true},
//                                  {"bos_token", "<s>"}});
//
// Every syntax error, unsupported construct or runtime error throws unillm::ConfigError naming
// the template, the line and the construct; nothing renders silently empty.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace unillm::jinja {

// Bounds that keep a hostile template from hanging or exhausting memory.
struct RenderLimits {
  size_t max_output = 64u << 20;     // bytes of rendered text (and of any one string built)
  uint64_t max_steps = 100'000'000;  // statements + expressions evaluated
  int max_depth = 400;               // nested evaluation (macro recursion included)
};

struct TemplateData;

class Template {
 public:
  // context: {messages, tools, add_generation_prompt, bos_token, eos_token, ...}. Pass an
  // ordered_json where key order matters (tojson keeps it, as Python dicts do); nlohmann::json
  // sorts object keys.
  std::string render(const nlohmann::ordered_json& context) const;
  std::string render(const nlohmann::json& context) const;
  const std::string& name() const;
  RenderLimits limits;

 private:
  friend Template parse(const std::string& source, const std::string& name);
  std::shared_ptr<const TemplateData> data_;
};

// Parses `source`; `name` (a file name or "chat_template") prefixes every error message.
Template parse(const std::string& source, const std::string& name);

}  // namespace unillm::jinja
