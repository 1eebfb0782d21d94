// Chat template rendering as LLaMA-Factory's Template / Llama2Template / ReasoningTemplate
// (src/llamafactory/data/template.py, formatter.py): each formatted slot is tokenised on its own
// with special-token strings recognised, BOS/EOS slots become ids, system and prefix go on the
// first message only.
#include "data/template.h"

#include <algorithm>
#include <ctime>

#include "core/error.h"
#include "data/error.h"
#include "data/template_tools.h"

namespace unillm::data {
namespace {

void replace_first(std::string& s, const std::string& from, const std::string& to) {
  size_t p = s.find(from);
  if (p != std::string::npos) s.replace(p, from.size(), to);
}

// Python's str.strip() for the ASCII whitespace our thought words carry.
std::string strip(const std::string& s) {
  const char* ws = " \t\n\r\v\f";
  size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(ws);
  return s.substr(b, e - b + 1);
}

std::string known_list() {
  std::string out;
  for (const std::string& n : ChatTemplate::names()) out += (out.empty() ? "" : ", ") + n;
  return out;
}

class DefinedTemplate final : public ChatTemplate {
 public:
  DefinedTemplate(const TemplateDef& def, const io::Tokenizer& tok, const TemplateOptions& o);

  using ChatTemplate::encode_multiturn;
  using ChatTemplate::encode_prompt;
  const TemplateDef& def() const override { return def_; }
  std::vector<EncodedTurn> encode_multiturn(const std::vector<Message>& messages,
                                            const std::string& system, bool discard_history_thought,
                                            const std::string& tools) const override;
  std::vector<int32_t> encode_prompt(const std::vector<Message>& messages,
                                     const std::string& system,
                                     const std::string& tools) const override;
  std::vector<int32_t> stop_ids() const override { return stop_ids_; }
  int32_t eos_id() const override { return eos_; }
  bool efficient_eos() const override { return def_.efficient_eos; }

 private:
  using Ids = std::vector<int32_t>;
  int32_t require_token(const std::string& token) const;
  void check_roles(const std::vector<Message>& messages) const;
  // LLaMA-Factory's _encode: one id list per message.
  std::vector<Ids> encode_messages(const std::vector<Message>& messages, const std::string& system,
                                   const std::string& tools) const;
  std::string tool_text(const std::string& tools) const;
  std::string function_text(const Message& m, size_t index) const;
  // StringFormatter.apply + _convert_elements_to_ids for one formatter, appended to out.
  void append_slots(const TemplateSlots& slots, const std::string& content, const std::string* idx,
                    Ids& out) const;
  void append_text(const std::string& text, Ids& out) const;
  bool reasoning() const {
    return def_.template_class == TemplateClass::kReasoning ||
           def_.template_class == TemplateClass::kGlm47Reasoning;
  }
  bool thinking() const { return opt_.enable_thinking.value_or(false); }  // Python truthiness
  std::string remove_thought(const std::string& s) const;
  bool has_thought(const std::string& s) const;
  Ids empty_thought_ids() const;
  // ReasoningTemplate: the empty thought before a response without one, into the prompt
  // (enable_thinking false/None) or the scored response.
  void add_empty_thought(const std::string& response, Ids& prompt, Ids& response_ids) const;
  EncodedTurn oneturn(const std::vector<Message>& messages, const std::string& system,
                      const std::string& tools) const override;

  TemplateDef def_;
  const io::Tokenizer& tok_;
  TemplateOptions opt_;
  std::string default_system_;
  int32_t eos_ = -1;
  std::vector<int32_t> stop_ids_;
};

DefinedTemplate::DefinedTemplate(const TemplateDef& def, const io::Tokenizer& tok,
                                 const TemplateOptions& o)
    : def_(def), tok_(tok), opt_(o) {
  name_ = def.name;
  default_system_ = o.default_system.value_or(def.default_system);
  if (o.tool_format) {  // get_template_and_fix_tokenizer's data_args.tool_format
    def_.tool_format = def_.function_format = *o.tool_format;
    def_.format_tools.clear();
    def_.format_function = {{TemplateSlot::Kind::kText, "{{content}}"}};
    if (!def_.efficient_eos) def_.format_function.push_back({TemplateSlot::Kind::kEos, ""});
  }
  check_tool_format(def_.tool_format, "template '" + name_ + "'");
  check_tool_format(def_.function_format, "template '" + name_ + "'");
  // fix_special_tokens: the first stop word replaces EOS; a tokenizer without EOS gets
  // <|endoftext|>. Training adds missing stop words to the tokenizer first (train/vocab.h, as
  // LLaMA-Factory); here each must already be in the vocabulary.
  if (def.replace_eos) {
    if (def.stop_words.empty())
      UNILLM_THROW(ConfigError, "[template] '", name_, "': replace_eos needs stop words");
    eos_ = require_token(def.stop_words[0]);
  } else {
    eos_ = tok.eos_id() >= 0 ? tok.eos_id() : require_token("<|endoftext|>");
  }
  stop_ids_.push_back(eos_);
  for (const std::string& w : def.stop_words)
    if (auto id = tok.token_to_id(w)) stop_ids_.push_back(*id);
  std::sort(stop_ids_.begin(), stop_ids_.end());
  stop_ids_.erase(std::unique(stop_ids_.begin(), stop_ids_.end()), stop_ids_.end());
  for (const TemplateSlots* slots :
       {&def_.format_user, &def_.format_assistant, &def_.format_system, &def_.format_observation,
        &def_.format_prefix, &def_.format_function, &def_.format_tools})
    for (const TemplateSlot& s : *slots)
      if (s.kind == TemplateSlot::Kind::kToken) require_token(s.text);
}

int32_t DefinedTemplate::require_token(const std::string& token) const {
  auto id = tok_.token_to_id(token);
  if (!id)
    UNILLM_THROW(ConfigError, "[template] '", name_, "' needs the token '", token,
                 "', which the tokenizer does not have (wrong template for this model? training adds "
                 "it with add_special_tokens: ", token, " and resize_vocab: true)");
  return *id;
}

void DefinedTemplate::append_text(const std::string& text, Ids& out) const {
  if (text.empty()) return;
  io::EncodeOptions eo;
  eo.add_special_tokens = false;
  eo.parse_special = true;  // HF tokenizer.encode recognises special-token strings
  Ids ids = tok_.encode(text, eo);
  out.insert(out.end(), ids.begin(), ids.end());
}

void DefinedTemplate::append_slots(const TemplateSlots& slots, const std::string& content,
                                   const std::string* idx, Ids& out) const {
  for (const TemplateSlot& s : slots) {
    switch (s.kind) {
      case TemplateSlot::Kind::kText: {
        std::string t = s.text;  // placeholders replaced in keyword order, first occurrence only
        replace_first(t, "{{content}}", content);
        if (idx) replace_first(t, "{{idx}}", *idx);
        append_text(t, out);
        break;
      }
      case TemplateSlot::Kind::kBos:
        if (tok_.bos_id() >= 0) out.push_back(tok_.bos_id());
        break;
      case TemplateSlot::Kind::kEos:
        out.push_back(eos_);
        break;
      case TemplateSlot::Kind::kToken:
        out.push_back(*tok_.token_to_id(s.text));
        break;
    }
  }
}

void DefinedTemplate::check_roles(const std::vector<Message>& messages) const {
  for (size_t i = 0; i < messages.size(); ++i) {
    Role r = messages[i].role;
    bool prompt_side = i % 2 == 0;
    bool ok = prompt_side ? (r == Role::kUser || r == Role::kObservation)
                          : (r == Role::kAssistant || r == Role::kFunction);
    if (!ok)
      UNILLM_THROW(DataError, "[template] message ", i + 1, " has the wrong role: expected ",
                   prompt_side ? "user or observation" : "assistant or function",
                   " (messages alternate, starting with user; the system prompt is separate)");
  }
}

// Today as "%d %b %Y" (the llama3 tool prompt's date, as LLaMA-Factory's datetime.now()).
std::string today() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%d %b %Y", &tm);
  return buf;
}

// Python's str.replace(a, "") (every occurrence).
std::string erase_all(std::string s, const std::string& a) {
  if (a.empty()) return s;
  for (size_t p = s.find(a); p != std::string::npos; p = s.find(a, p)) s.erase(p, a.size());
  return s;
}

// re.search(escape(open) + "(.*?)" + escape(close), s, DOTALL): {whole match, group 1}.
std::optional<std::pair<std::string, std::string>> find_wrapped(const std::string& s,
                                                                const std::string& open,
                                                                const std::string& close) {
  size_t p = s.find(open);
  if (p == std::string::npos) return std::nullopt;
  size_t q = s.find(close, p + open.size());
  if (q == std::string::npos) return std::nullopt;
  return std::make_pair(s.substr(p, q + close.size() - p),
                        s.substr(p + open.size(), q - p - open.size()));
}

}  // namespace

// ToolFormatter.apply(content=tools)[0] (or a StringFormatter's first slot).
std::string DefinedTemplate::tool_text(const std::string& tools) const {
  if (tools.empty()) return "";
  if (!def_.format_tools.empty()) {
    std::string t = def_.format_tools.at(0).text;
    replace_first(t, "{{content}}", tools);
    return t;
  }
  nlohmann::ordered_json parsed;
  try {
    parsed = nlohmann::ordered_json::parse(tools);
  } catch (const nlohmann::json::exception&) {
    UNILLM_THROW(DataError, "[template] invalid JSON in the tools description: ", tools);
  }
  if (parsed.empty()) return "";
  return format_tools(def_.tool_format, parsed, opt_.tool_date.empty() ? today() : opt_.tool_date);
}

// FunctionFormatter.apply's content: the call JSON (inside tool-call words, or beside a thought)
// through the function format; Llama2Template passes no thought or tool-call words.
std::string DefinedTemplate::function_text(const Message& m, size_t index) const {
  const std::string where = "message " + std::to_string(index + 1);
  const std::string& c = m.content;
  const bool words = def_.template_class != TemplateClass::kLlama2;
  auto call = words ? find_wrapped(c, def_.tool_call_open, def_.tool_call_close) : std::nullopt;
  if (call) {
    std::vector<FunctionCall> calls = parse_function_message(call->second, where);
    return erase_all(c, call->first) + format_function_calls(def_.function_format, calls);
  }
  auto thought = words ? find_wrapped(c, def_.thought_open, def_.thought_close) : std::nullopt;
  const std::string json_part = thought ? erase_all(c, thought->first) : c;
  std::string text =
      format_function_calls(def_.function_format, parse_function_message(json_part, where));
  return thought ? thought->first + text : text;
}

std::vector<DefinedTemplate::Ids> DefinedTemplate::encode_messages(
    const std::vector<Message>& messages, const std::string& system_in,
    const std::string& tools) const {
  const std::string& system = system_in.empty() ? default_system_ : system_in;
  const bool llama2 = def_.template_class == TemplateClass::kLlama2;
  std::vector<Ids> encoded;
  for (size_t i = 0; i < messages.size(); ++i) {
    Ids ids;
    std::string system_text;  // Llama2Template: glued before the first user content
    if (i == 0) {
      append_slots(def_.format_prefix, "", nullptr, ids);
      if (!system.empty() || !tools.empty()) {
        std::string tt = tool_text(tools);
        if (def_.template_class == TemplateClass::kMossVl && !tools.empty() && system.empty())
          tt.erase(0, tt.find_first_not_of('\n') == std::string::npos ? tt.size()
                                                                      : tt.find_first_not_of('\n'));
        if (llama2) {
          const TemplateSlot& first = def_.format_system.at(0);
          UNILLM_CHECK(first.kind == TemplateSlot::Kind::kText, "llama2-class system slot");
          system_text = first.text;
          replace_first(system_text, "{{content}}", system + tt);
        } else {
          append_slots(def_.format_system, system + tt, nullptr, ids);
        }
      }
    }
    const Message& m = messages[i];
    const std::string idx = std::to_string(i / 2);
    if (m.role == Role::kUser)
      append_slots(def_.format_user, system_text + m.content, llama2 ? nullptr : &idx, ids);
    else if (m.role == Role::kAssistant)
      append_slots(def_.format_assistant, m.content, nullptr, ids);
    else if (m.role == Role::kFunction)
      append_slots(def_.format_function, function_text(m, i), nullptr, ids);
    else
      append_slots(def_.format_observation, m.content, nullptr, ids);
    encoded.push_back(std::move(ids));
  }
  return encoded;
}

// re.sub(escape(open) + "(.*?)" + escape(close), "", s, flags=DOTALL).lstrip("\n")
std::string DefinedTemplate::remove_thought(const std::string& s) const {
  const std::string &a = def_.thought_open, &b = def_.thought_close;
  std::string out;
  size_t pos = 0;
  while (true) {
    size_t p = s.find(a, pos);
    if (p == std::string::npos) break;
    size_t q = s.find(b, p + a.size());
    if (q == std::string::npos) break;
    out.append(s, pos, p - pos);
    pos = q + b.size();
  }
  out.append(s, pos, std::string::npos);
  size_t first = out.find_first_not_of('\n');
  return first == std::string::npos ? "" : out.substr(first);
}

bool DefinedTemplate::has_thought(const std::string& s) const {
  return s.find(strip(def_.thought_open)) != std::string::npos ||
         s.find(strip(def_.thought_close)) != std::string::npos;
}

// add_thought(""): open + close words (Glm47ReasoningTemplate: the close word alone).
DefinedTemplate::Ids DefinedTemplate::empty_thought_ids() const {
  Ids ids;
  if (def_.template_class == TemplateClass::kGlm47Reasoning)
    append_text(def_.thought_close, ids);
  else
    append_text(def_.thought_open + def_.thought_close, ids);
  return ids;
}

void DefinedTemplate::add_empty_thought(const std::string& response, Ids& prompt,
                                        Ids& response_ids) const {
  if (has_thought(response)) return;
  Ids thought = empty_thought_ids();
  if (!thinking())  // not scored: the empty thought ends the prompt
    prompt.insert(prompt.end(), thought.begin(), thought.end());
  else  // scored: it starts the response
    response_ids.insert(response_ids.begin(), thought.begin(), thought.end());
}

std::vector<EncodedTurn> DefinedTemplate::encode_multiturn(const std::vector<Message>& messages_in,
                                                           const std::string& system,
                                                           bool discard_history_thought,
                                                           const std::string& tools) const {
  if (messages_in.empty() || messages_in.size() % 2 != 0)
    UNILLM_THROW(DataError, "[template] encode_multiturn needs an even, non-zero number of ",
                 "messages (user/assistant pairs), got ", messages_in.size());
  check_roles(messages_in);
  std::vector<Message> messages = messages_in;
  const size_t n = messages.size();
  const bool discard = reasoning() && discard_history_thought;
  if (reasoning() && opt_.enable_thinking == false)  // remove every thought
    for (size_t i = 1; i < n; i += 2) messages[i].content = remove_thought(messages[i].content);
  if (discard)  // keep only the last response's thought
    for (size_t i = 1; i + 2 < n; i += 2) messages[i].content = remove_thought(messages[i].content);
  std::vector<Ids> enc = encode_messages(messages, system, tools);
  if (reasoning())
    for (size_t i = discard ? n - 2 : 0; i < n; i += 2)
      add_empty_thought(messages[i + 1].content, enc[i], enc[i + 1]);
  std::vector<EncodedTurn> turns;
  for (size_t i = 0; i < n; i += 2) turns.push_back({std::move(enc[i]), std::move(enc[i + 1])});
  return turns;
}

// Template.encode_oneturn / ReasoningTemplate.encode_oneturn.
EncodedTurn DefinedTemplate::oneturn(const std::vector<Message>& messages_in,
                                     const std::string& system, const std::string& tools) const {
  if (messages_in.empty() || messages_in.size() % 2 != 0)
    UNILLM_THROW(DataError, "[template] encode_oneturn needs an even, non-zero number of ",
                 "messages (user/assistant pairs), got ", messages_in.size());
  check_roles(messages_in);
  std::vector<Message> messages = messages_in;
  const size_t n = messages.size();
  if (reasoning() && !opt_.preserve_thinking)
    for (size_t i = 1; i + 2 < n; i += 2) messages[i].content = remove_thought(messages[i].content);
  if (reasoning() && opt_.enable_thinking == false)
    messages[n - 1].content = remove_thought(messages[n - 1].content);
  std::vector<Ids> enc = encode_messages(messages, system, tools);
  EncodedTurn out;
  for (size_t i = 0; i + 1 < n; ++i)
    out.prompt.insert(out.prompt.end(), enc[i].begin(), enc[i].end());
  out.response = std::move(enc[n - 1]);
  if (reasoning()) add_empty_thought(messages[n - 1].content, out.prompt, out.response);
  return out;
}

std::vector<int32_t> DefinedTemplate::encode_prompt(const std::vector<Message>& messages_in,
                                                    const std::string& system,
                                                    const std::string& tools) const {
  if (messages_in.size() % 2 != 1)
    UNILLM_THROW(DataError, "[template] encode_prompt needs an odd number of messages ending ",
                 "with the user turn, got ", messages_in.size());
  std::vector<Message> messages = messages_in;
  messages.push_back({Role::kAssistant, ""});
  return oneturn(messages, system, tools).prompt;
}

namespace {

// Jinja chat templates whose rendering a built-in template reproduces.
struct KnownJinja {
  const char* jinja;
  const char* name;
  const char* default_system;  // the system prompt the Jinja renders when none is given
};

const KnownJinja kKnownJinja[] = {
    // Qwen2-Instruct's ChatML template.
    {"{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
     "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
     "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
     "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}",
     "qwen", "You are a helpful assistant."},
    // ChatML as LLaMA-Factory writes it for its qwen template (tests/data/qwen2-tokenizer).
    {"{% set system_message = 'You are a helpful assistant.' %}{% if messages[0]['role'] == "
     "'system' %}{% set system_message = messages[0]['content'] %}{% endif %}{% if "
     "system_message is defined %}{{ '<|im_start|>system\n' + system_message + '<|im_end|>\n' }}"
     "{% endif %}{% for message in messages %}{% set content = message['content'] %}{% if "
     "message['role'] == 'user' %}{{ '<|im_start|>user\n' + content + '<|im_end|>\n"
     "<|im_start|>assistant\n' }}{% elif message['role'] == 'assistant' %}{{ content + "
     "'<|im_end|>' + '\n' }}{% endif %}{% endfor %}",
     "qwen", "You are a helpful assistant."},
    // Meta Llama 3 Instruct.
    {"{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
     "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | "
     "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
     "{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
     "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}",
     "llama3", ""},
};

}  // namespace

std::unique_ptr<ChatTemplate> ChatTemplate::from_def(const TemplateDef& def,
                                                     const io::Tokenizer& tok,
                                                     const TemplateOptions& options) {
  return std::make_unique<DefinedTemplate>(def, tok, options);
}

std::unique_ptr<ChatTemplate> ChatTemplate::by_name(const std::string& name,
                                                    const io::Tokenizer& tok,
                                                    const TemplateOptions& options) {
  if (name == "auto" || name == "jinja")
    UNILLM_THROW(ConfigError, "[template] template '", name,
                 "' (rendering the model's Jinja chat_template) is not supported; name one of: ",
                 known_list());
  const TemplateDef* def = find_template_def(name);
  if (!def)
    UNILLM_THROW(ConfigError, "[template] unknown template '", name, "'; known: ", known_list());
  return from_def(*def, tok, options);
}

std::string recognize_jinja_template(const std::string& jinja) {
  std::string j = strip(jinja);
  for (const KnownJinja& k : kKnownJinja)
    if (j == k.jinja) return k.name;
  return "";
}

std::optional<std::string> jinja_default_system(const std::string& jinja) {
  std::string j = strip(jinja);
  for (const KnownJinja& k : kKnownJinja)
    if (j == k.jinja) return std::string(k.default_system);
  return std::nullopt;
}

}  // namespace unillm::data
