// Template → Jinja chat_template and Ollama Modelfile (template_export.h), following
// LLaMA-Factory's data/template.py so an exported model renders the way it was trained.
#include "data/template_export.h"

#include <algorithm>

#include "core/error.h"

namespace unillm::data {

namespace {

std::string escape(const std::string& s) {  // LLaMA-Factory's _jinja_escape: ' → \'
  std::string out;
  for (char c : s) out += c == '\'' ? std::string("\\'") : std::string(1, c);
  return out;
}

std::string bos_text(const io::Tokenizer& tok) { return tok.bos_id() >= 0 ? tok.id_to_token(tok.bos_id()) : ""; }

std::string eos_text(const TemplateDef& d, const io::Tokenizer& tok) {
  if (d.replace_eos && !d.stop_words.empty()) return d.stop_words[0];  // fix_special_tokens
  return tok.eos_id() >= 0 ? tok.id_to_token(tok.eos_id()) : "";
}

// _convert_slots_to_jinja: quoted text pieces and the placeholder joined by " + "; nullopt on a
// named-token slot.
std::optional<std::string> slots_to_jinja(const TemplateSlots& slots, const TemplateDef& d, const io::Tokenizer& tok,
                                          const std::string& placeholder = "content") {
  std::vector<std::string> items;
  for (const TemplateSlot& s : slots) {
    switch (s.kind) {
      case TemplateSlot::Kind::kText: {
        const size_t at = s.text.find("{{content}}");
        const std::string before = s.text.substr(0, at);
        if (!before.empty()) items.push_back("'" + escape(before) + "'");
        if (at != std::string::npos) {
          items.push_back(placeholder);
          const std::string after = s.text.substr(at + 11);
          if (!after.empty()) items.push_back("'" + escape(after) + "'");
        }
        break;
      }
      case TemplateSlot::Kind::kBos:
        if (tok.bos_id() >= 0) items.push_back("'" + bos_text(tok) + "'");
        break;
      case TemplateSlot::Kind::kEos:
        if (tok.eos_id() >= 0) items.push_back("'" + eos_text(d, tok) + "'");
        break;
      case TemplateSlot::Kind::kToken:
        return std::nullopt;
    }
  }
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? " + " : "") + items[i];
  return out;
}

// _convert_slots_to_ollama: the texts with {{ placeholder }}; named tokens left out.
std::string slots_to_ollama(const TemplateSlots& slots, const TemplateDef& d, const io::Tokenizer& tok,
                            const std::string& placeholder) {
  std::string out;
  for (const TemplateSlot& s : slots) {
    if (s.kind == TemplateSlot::Kind::kText) {
      const size_t at = s.text.find("{{content}}");
      out += s.text.substr(0, at);
      if (at != std::string::npos) out += "{{ " + placeholder + " }}" + s.text.substr(at + 11);
    } else if (s.kind == TemplateSlot::Kind::kBos && tok.bos_id() >= 0) {
      out += bos_text(tok);
    } else if (s.kind == TemplateSlot::Kind::kEos && tok.eos_id() >= 0) {
      out += eos_text(d, tok);
    }
  }
  return out;
}

}  // namespace

std::optional<std::string> jinja_chat_template(const ChatTemplate& t, const io::Tokenizer& tok) {
  const TemplateDef& d = t.def();
  const auto prefix = slots_to_jinja(d.format_prefix, d, tok);
  const auto system = slots_to_jinja(d.format_system, d, tok, "system_message");
  const auto user = slots_to_jinja(d.format_user, d, tok);
  const auto assistant = slots_to_jinja(d.format_assistant, d, tok);
  if (!prefix || !system || !user || !assistant) return std::nullopt;
  std::string j;
  if (!prefix->empty()) j += "{{ " + *prefix + " }}";
  if (!d.default_system.empty()) j += "{% set system_message = '" + escape(d.default_system) + "' %}";
  j += "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
       "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% endif %}";
  if (d.template_class == TemplateClass::kLlama2) {
    j += "{% for message in loop_messages %}"
         "{% if loop.index0 == 0 and system_message is defined %}"
         "{% set content = " + *system + " + message['content'] %}"
         "{% else %}{% set content = message['content'] %}{% endif %}";
  } else {
    j += "{% if system_message is defined %}{{ " + *system + " }}{% endif %}"
         "{% for message in loop_messages %}{% set content = message['content'] %}";
  }
  j += "{% if message['role'] == 'user' %}{{ " + *user + " }}"
       "{% elif message['role'] == 'assistant' %}{{ " + *assistant + " }}{% endif %}{% endfor %}";
  return j;
}

bool replaces_jinja_template(const std::string& name) {
  // The rows registered with replace_jinja_template=True (tests/data/templates/lf_templates.json).
  static const char* const kReplace[] = {"alpaca", "chatml", "chatml_de", "default", "ernie_vl", "fewshot", "vicuna"};
  return std::any_of(std::begin(kReplace), std::end(kReplace), [&](const char* n) { return name == n; });
}

std::string template_of_exported_jinja(const std::string& jinja, const io::Tokenizer& tok) {
  for (const std::string& name : ChatTemplate::names()) {
    try {
      const auto t = ChatTemplate::by_name(name, tok);
      if (jinja_chat_template(*t, tok) == jinja) return name;
    } catch (const Error&) {  // a template this tokenizer cannot run (a missing token)
    }
  }
  return "";
}

std::string ollama_modelfile(const ChatTemplate& t, const io::Tokenizer& tok) {
  const TemplateDef& d = t.def();
  std::string m = "# ollama modelfile auto-generated by unillm (as LLaMA-Factory's export writes it)\n\n";
  m += "FROM .\n\nTEMPLATE \"\"\"" + slots_to_ollama(d.format_prefix, d, tok, "") + "{{ if .System }}" +
       slots_to_ollama(d.format_system, d, tok, ".System") + "{{ end }}{{ range .Messages }}{{ if eq .Role \"user\" }}" +
       slots_to_ollama(d.format_user, d, tok, ".Content") + "{{ else if eq .Role \"assistant\" }}" +
       slots_to_ollama(d.format_assistant, d, tok, ".Content") + "{{ end }}{{ end }}\"\"\"\n\n";
  if (!d.default_system.empty()) m += "SYSTEM \"\"\"" + d.default_system + "\"\"\"\n\n";
  for (int32_t id : t.stop_ids()) m += "PARAMETER stop \"" + tok.id_to_token(id) + "\"\n";
  m += "PARAMETER num_ctx 4096\n";
  return m;
}

}  // namespace unillm::data
