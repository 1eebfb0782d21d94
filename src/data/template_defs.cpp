// The built-in chat templates: LLaMA-Factory's register_template definitions (its
// src/llamafactory/data/template.py) for the Llama-family models, with its defaults filled in.
#include <algorithm>

#include "data/template.h"

namespace unillm::data {
namespace {

TemplateSlot text(const char* s) { return {TemplateSlot::Kind::kText, s}; }
const TemplateSlot kBos{TemplateSlot::Kind::kBos, ""};
const TemplateSlot kEos{TemplateSlot::Kind::kEos, ""};

constexpr const char* kChatmlUser =
    "<|im_start|>user\n{{content}}<|im_end|>\n<|im_start|>assistant\n";
constexpr const char* kChatmlAssistant = "{{content}}<|im_end|>\n";
constexpr const char* kChatmlSystem = "<|im_start|>system\n{{content}}<|im_end|>\n";
constexpr const char* kQwenObservation =
    "<|im_start|>user\n<tool_response>\n{{content}}\n</tool_response><|im_end|>\n"
    "<|im_start|>assistant\n";

// register_template's defaults: user/system "{{content}}", assistant "{{content}}" + EOS (no
// EOS with efficient_eos), observation = the user format.
TemplateDef finish(TemplateDef d) {
  if (d.format_user.empty()) d.format_user = {text("{{content}}")};
  if (d.format_assistant.empty()) {
    d.format_assistant = {text("{{content}}")};
    if (!d.efficient_eos) d.format_assistant.push_back(kEos);
  }
  if (d.format_system.empty()) d.format_system = {text("{{content}}")};
  if (d.format_observation.empty()) d.format_observation = d.format_user;
  return d;
}

TemplateDef qwen_like(const char* name, TemplateClass cls, const char* default_system) {
  TemplateDef d;
  d.name = name;
  d.format_user = {text(kChatmlUser)};
  d.format_assistant = {text(kChatmlAssistant)};
  d.format_system = {text(kChatmlSystem)};
  d.format_observation = {text(kQwenObservation)};
  d.default_system = default_system;
  d.stop_words = {"<|im_end|>"};
  d.replace_eos = true;
  d.template_class = cls;
  return finish(d);
}

TemplateDef def_alpaca() {
  TemplateDef d;
  d.name = "alpaca";
  d.format_user = {text("### Instruction:\n{{content}}\n\n### Response:\n")};
  d.format_assistant = {text("{{content}}"), kEos, text("\n\n")};
  d.default_system =
      "Below is an instruction that describes a task. Write a response that appropriately "
      "completes the request.\n\n";
  return finish(d);
}

TemplateDef def_chatml() {
  TemplateDef d;
  d.name = "chatml";
  d.format_user = {text(kChatmlUser)};
  d.format_assistant = {text(kChatmlAssistant)};
  d.format_system = {text(kChatmlSystem)};
  d.format_observation = {text("<|im_start|>tool\n{{content}}<|im_end|>\n<|im_start|>assistant\n")};
  d.stop_words = {"<|im_end|>", "<|im_start|>"};
  d.replace_eos = true;
  return finish(d);
}

TemplateDef def_default() {
  TemplateDef d;
  d.name = "default";
  d.format_user = {text("Human: {{content}}"), kEos, text("\nAssistant:")};
  d.format_assistant = {text("{{content}}"), kEos, text("\n")};
  d.format_system = {text("System: {{content}}"), kEos, text("\n")};
  return finish(d);
}

TemplateDef def_empty() {
  TemplateDef d;
  d.name = "empty";
  d.format_assistant = {text("{{content}}")};
  return finish(d);
}

TemplateDef def_llama2() {
  TemplateDef d;
  d.name = "llama2";
  d.format_user = {kBos, text("[INST] {{content}} [/INST]")};
  d.format_system = {text("<<SYS>>\n{{content}}\n<</SYS>>\n\n")};
  d.template_class = TemplateClass::kLlama2;
  return finish(d);
}

TemplateDef def_llama3() {
  TemplateDef d;
  d.name = "llama3";
  d.format_user = {
      text("<|start_header_id|>user<|end_header_id|>\n\n{{content}}<|eot_id|>"
           "<|start_header_id|>assistant<|end_header_id|>\n\n")};
  d.format_assistant = {text("{{content}}<|eot_id|>")};
  d.format_system = {text("<|start_header_id|>system<|end_header_id|>\n\n{{content}}<|eot_id|>")};
  d.format_observation = {
      text("<|start_header_id|>ipython<|end_header_id|>\n\n{{content}}"
           "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")};
  d.format_prefix = {kBos};
  d.stop_words = {"<|eot_id|>", "<|eom_id|>"};
  d.replace_eos = true;
  return finish(d);
}

TemplateDef def_mistral() {
  TemplateDef d;
  d.name = "mistral";
  d.format_user = {text("[INST] {{content}}[/INST]")};
  d.format_assistant = {text(" {{content}}"), kEos};
  d.format_system = {text("{{content}}\n\n")};
  d.format_observation = {text("[TOOL_RESULTS] {\"content\": {{content}}}[/TOOL_RESULTS]")};
  d.format_prefix = {kBos};
  d.template_class = TemplateClass::kLlama2;
  return finish(d);
}

TemplateDef def_solar() {
  TemplateDef d;
  d.name = "solar";
  d.format_user = {text("### User:\n{{content}}\n\n### Assistant:\n")};
  d.format_system = {text("### System:\n{{content}}\n\n")};
  d.efficient_eos = true;
  return finish(d);
}

TemplateDef def_vicuna() {
  TemplateDef d;
  d.name = "vicuna";
  d.format_user = {text("USER: {{content}} ASSISTANT:")};
  d.default_system =
      "A chat between a curious user and an artificial intelligence assistant. The assistant "
      "gives helpful, detailed, and polite answers to the user's questions.";
  return finish(d);
}

std::vector<TemplateDef> build_defs() {
  return {def_alpaca(),
          def_chatml(),
          def_default(),
          def_empty(),
          def_llama2(),
          def_llama3(),
          def_mistral(),
          qwen_like("qwen", TemplateClass::kPlain,
                    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."),
          qwen_like("qwen3", TemplateClass::kReasoning, ""),
          def_solar(),
          def_vicuna()};
}

const std::vector<TemplateDef>& builtin_defs() {
  static const std::vector<TemplateDef> defs = build_defs();  // immutable after first use
  return defs;
}

}  // namespace

const TemplateDef* find_template_def(const std::string& name) {
  for (const TemplateDef& d : builtin_defs())
    if (d.name == name) return &d;
  return nullptr;
}

std::vector<std::string> ChatTemplate::names() {
  std::vector<std::string> out;
  for (const TemplateDef& d : builtin_defs()) out.push_back(d.name);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace unillm::data
