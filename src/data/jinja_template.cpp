// JinjaChatTemplate: the model's own chat_template rendered as transformers' apply_chat_template
// does, turn spans found by rendering growing prefixes of the conversation (the text of the
// prompt is a prefix of the text with the response), ids from tokenising the whole text.
#include "data/jinja_template.h"

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "data/error.h"
#include "io/json_file.h"

namespace unillm::data {
namespace {

using ojson = nlohmann::ordered_json;

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}

// A special token of tokenizer_config.json / special_tokens_map.json as transformers keeps it:
// a string, or an AddedToken dict {"content": ...}; "" when unset.
std::string token_text(const ojson& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  return "";
}

// transformers' special_tokens_map: the set attributes, in SPECIAL_TOKENS_ATTRIBUTES order.
// special_tokens_map.json wins over tokenizer_config.json (as from_pretrained reads them).
ojson special_tokens_of(const ojson& config, const ojson& map_file) {
  ojson out = ojson::object();
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                          "cls_token", "mask_token"}) {
    std::string v = map_file.contains(key) ? token_text(map_file[key]) : "";
    if (v.empty() && config.contains(key)) v = token_text(config[key]);
    if (!v.empty()) out[key] = v;
  }
  const char* extra = "additional_special_tokens";
  const ojson& src = map_file.contains(extra) && map_file[extra].is_array() ? map_file : config;
  if (src.contains(extra) && src[extra].is_array()) {
    ojson list = ojson::array();
    for (const ojson& t : src[extra])
      if (std::string s = token_text(t); !s.empty()) list.push_back(s);
    if (!list.empty()) out[extra] = list;
  }
  return out;
}

ojson read_json_file(const std::filesystem::path& p) {
  if (!std::filesystem::exists(p)) return ojson::object();
  ojson j = ojson::parse(io::read_file_bytes(p.string()), nullptr, false);
  if (j.is_discarded() || !j.is_object())
    UNILLM_THROW(ConfigError, "[template] ", p.string(), ": not a JSON object");
  return j;
}

// tokenizer_config.json's chat_template: a string, or (newer files) a list of {name, template}
// of which transformers 4.46 renders "default" when no name is asked for.
std::string chat_template_of(const ojson& config, const std::string& path) {
  if (!config.contains("chat_template") || config["chat_template"].is_null())
    UNILLM_THROW(ConfigError, "[template] ", path, " has no chat_template (template '",
                 kJinjaTemplateName, "' renders the model's own one); name a template instead");
  const ojson& t = config["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array())
    for (const ojson& e : t)
      if (e.is_object() && e.value("name", "") == "default" && e.contains("template") &&
          e["template"].is_string())
        return e["template"].get<std::string>();
  UNILLM_THROW(ConfigError, "[template] ", path,
               ": key 'chat_template' must be a string or a list of {name, template} with a "
               "'default' entry");
}

// Which of data::parse_tool_calls' formats reads this template's tool calls back (a guess from
// the markers the Jinja writes; `default` when none is seen).
std::string guess_tool_format(const std::string& source) {
  if (source.find("<tool_call>") != std::string::npos) return "qwen";
  if (source.find("[TOOL_CALLS]") != std::string::npos) return "mistral";
  if (source.find("<|python_tag|>") != std::string::npos) return "llama3";
  return "default";
}

// A function message's content ({"name", "arguments"} or a list of them) as OpenAI tool_calls.
ojson tool_calls_of(const std::string& content, size_t index) {
  ojson v = ojson::parse(content, nullptr, false);
  if (v.is_object()) v = ojson::array({v});
  bool ok = v.is_array() && !v.empty();
  ojson calls = ojson::array();
  for (size_t k = 0; ok && k < v.size(); ++k) {
    const ojson& c = v[k];
    ok = c.is_object() && c.contains("name") && c["name"].is_string() && c.contains("arguments");
    if (ok)
      calls.push_back({{"type", "function"},
                       {"function", {{"name", c["name"]}, {"arguments", c["arguments"]}}}});
  }
  if (!ok)
    UNILLM_THROW(DataError, "[template] message ", index + 1,
                 ": a function message must hold {\"name\", \"arguments\"} JSON (or a list of "
                 "them), got: ",
                 content.substr(0, 120));
  return calls;
}

void check_roles(const std::vector<Message>& messages) {
  for (size_t i = 0; i < messages.size(); ++i) {
    const Role r = messages[i].role;
    const bool prompt_side = i % 2 == 0;
    const bool ok = prompt_side ? (r == Role::kUser || r == Role::kObservation)
                                : (r == Role::kAssistant || r == Role::kFunction);
    if (!ok)
      UNILLM_THROW(DataError, "[template] message ", i + 1, " has the wrong role: expected ",
                   prompt_side ? "user or observation" : "assistant or function",
                   " (messages alternate, starting with user; the system prompt is separate)");
  }
}

}  // namespace

JinjaChatTemplate::JinjaChatTemplate(const std::string& source, ojson special_tokens,
                                     const io::Tokenizer& tok, const TemplateOptions& options,
                                     std::string origin)
    : jinja_(jinja::parse(source, origin)),
      specials_(std::move(special_tokens)),
      tok_(tok),
      opt_(options),
      origin_(std::move(origin)) {
  name_ = kJinjaTemplateName;
  if (opt_.tool_format)
    UNILLM_THROW(ConfigError, "[template] tool_format '", *opt_.tool_format,
                 "' does not apply to the model's own Jinja chat_template (", origin_,
                 "): the Jinja renders tools itself; remove tool_format or name a template");
  def_.name = kJinjaTemplateName;
  def_.tool_format = guess_tool_format(source);
  def_.function_format = def_.tool_format;
}

std::unique_ptr<JinjaChatTemplate> JinjaChatTemplate::load(const std::string& model_dir,
                                                           const io::Tokenizer& tok,
                                                           const TemplateOptions& options) {
  const std::filesystem::path dir(model_dir);
  const std::string path = (dir / "tokenizer_config.json").string();
  const ojson config = read_json_file(path);
  const std::string source = chat_template_of(config, path);
  ojson specials = special_tokens_of(config, read_json_file(dir / "special_tokens_map.json"));
  return std::make_unique<JinjaChatTemplate>(source, std::move(specials), tok, options, path);
}

std::unique_ptr<JinjaChatTemplate> JinjaChatTemplate::load_or(const std::string& model_dir,
                                                              const io::Tokenizer& tok,
                                                              const TemplateOptions& options,
                                                              const std::string& fallback) {
  const std::filesystem::path dir(model_dir);
  const std::filesystem::path path = dir / "tokenizer_config.json";
  const ojson config = read_json_file(path);
  if (config.contains("chat_template") && !config["chat_template"].is_null()) return load(model_dir, tok, options);
  ojson specials = special_tokens_of(config, read_json_file(dir / "special_tokens_map.json"));
  return std::make_unique<JinjaChatTemplate>(fallback, std::move(specials), tok, options,
                                             "the ChatML fallback (" + path.string() + " has no chat_template)");
}

ojson JinjaChatTemplate::hf_messages(const std::vector<Message>& messages,
                                     const std::string& system) const {
  ojson out = ojson::array();
  const std::string sys = system.empty() ? opt_.default_system.value_or("") : system;
  if (!sys.empty()) out.push_back({{"role", "system"}, {"content", sys}});
  for (size_t i = 0; i < messages.size(); ++i) {
    const Message& m = messages[i];
    switch (m.role) {
      case Role::kUser:
        out.push_back({{"role", "user"}, {"content", m.content}});
        break;
      case Role::kAssistant:
        out.push_back({{"role", "assistant"}, {"content", m.content}});
        break;
      case Role::kSystem:
        out.push_back({{"role", "system"}, {"content", m.content}});
        break;
      case Role::kObservation:
        out.push_back({{"role", "tool"}, {"content", m.content}});
        break;
      case Role::kFunction:
        out.push_back(
            {{"role", "assistant"}, {"content", ""}, {"tool_calls", tool_calls_of(m.content, i)}});
        break;
    }
  }
  return out;
}

ojson JinjaChatTemplate::hf_tools(const std::string& tools) const {
  if (tools.empty()) return nullptr;
  ojson v = ojson::parse(tools, nullptr, false);
  if (!v.is_array())
    UNILLM_THROW(DataError, "[template] tools must be a JSON list of tool schemas, got: ",
                 tools.substr(0, 120));
  if (v.empty()) return nullptr;
  ojson out = ojson::array();
  for (ojson& t : v) {
    if (!t.is_object()) UNILLM_THROW(DataError, "[template] each tool must be a JSON object");
    const bool openai = t.contains("type") && t["type"] == "function" && t.contains("function");
    out.push_back(openai ? t : ojson{{"type", "function"}, {"function", t}});
  }
  return out;
}

std::string JinjaChatTemplate::render_json(const ojson& messages, const ojson& tools,
                                           bool add_generation_prompt) const {
  ojson ctx = specials_;  // kwargs overwrite special tokens, as {**special_tokens_map, **kwargs}
  ctx["messages"] = messages;
  ctx["tools"] = tools;
  ctx["documents"] = nullptr;
  ctx["add_generation_prompt"] = add_generation_prompt;
  if (opt_.enable_thinking) ctx["enable_thinking"] = *opt_.enable_thinking;
  try {
    return jinja_.render(ctx);
  } catch (const Error& e) {  // raise_exception or a runtime error: this conversation is bad
    UNILLM_THROW(DataError, "[template] rendering the chat_template of ", origin_, ": ", e.what());
  }
}

std::string JinjaChatTemplate::render(const std::vector<Message>& messages,
                                      const std::string& system, const std::string& tools,
                                      bool add_generation_prompt) const {
  return render_json(hf_messages(messages, system), hf_tools(tools), add_generation_prompt);
}

std::vector<int32_t> JinjaChatTemplate::tokenize(const std::string& text) const {
  io::EncodeOptions o;
  o.add_special_tokens = false;  // apply_chat_template(tokenize=True): the Jinja writes BOS
  o.parse_special = true;
  return tok_.encode(text, o);
}

std::vector<int32_t> JinjaChatTemplate::encode_prompt(const std::vector<Message>& messages,
                                                      const std::string& system,
                                                      const std::string& tools) const {
  if (messages.size() % 2 == 0)
    UNILLM_THROW(DataError,
                 "[template] a prompt needs an odd number of messages ending with a "
                 "user or observation message, got ",
                 messages.size());
  check_roles(messages);
  return tokenize(render(messages, system, tools, true));
}

std::vector<EncodedTurn> JinjaChatTemplate::encode_multiturn(const std::vector<Message>& messages,
                                                             const std::string& system,
                                                             bool /*discard_history_thought*/,
                                                             const std::string& tools) const {
  if (messages.empty() || messages.size() % 2 != 0)
    UNILLM_THROW(DataError,
                 "[template] expected an even, non-zero number of messages (user, "
                 "assistant pairs), got ",
                 messages.size());
  check_roles(messages);
  const ojson all = hf_messages(messages, system);
  const ojson tool_list = hf_tools(tools);
  const size_t head = all.size() - messages.size();  // the system message, when given
  std::vector<size_t> cuts;
  std::string text;  // full_{i-1}, then full_i
  for (size_t i = 0; i < messages.size() / 2; ++i) {
    const ojson upto_user(all.begin(), all.begin() + static_cast<long>(head + 2 * i + 1));
    const ojson upto_reply(all.begin(), all.begin() + static_cast<long>(head + 2 * i + 2));
    const std::string prompt = render_json(upto_user, tool_list, true);
    std::string full = render_json(upto_reply, tool_list, false);
    if (!starts_with(prompt, text))
      UNILLM_THROW(DataError, "[template] ", origin_, ": turn ", i + 1,
                   ": the rendering of the earlier turns is not a prefix of this turn's prompt "
                   "(the template rewrites history, e.g. drops earlier thoughts), so the "
                   "response spans cannot be found; name a built-in template instead");
    if (!starts_with(full, prompt))
      UNILLM_THROW(DataError, "[template] ", origin_, ": turn ", i + 1,
                   ": the prompt rendered with add_generation_prompt is not a prefix of the "
                   "conversation with the response, so the response span cannot be found; name "
                   "a built-in template instead");
    cuts.push_back(prompt.size());
    cuts.push_back(full.size());
    text = std::move(full);
  }
  std::vector<std::vector<int32_t>> pieces = split(text, cuts);
  std::vector<EncodedTurn> out(messages.size() / 2);
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = {std::move(pieces[2 * i]), std::move(pieces[2 * i + 1])};
  return out;
}

std::vector<std::vector<int32_t>> JinjaChatTemplate::split(const std::string& text,
                                                           const std::vector<size_t>& cuts) const {
  std::vector<std::vector<int32_t>> pieces;
  std::vector<int32_t> joined;
  size_t begin = 0;
  for (size_t c : cuts) {
    pieces.push_back(tokenize(text.substr(begin, c - begin)));
    joined.insert(joined.end(), pieces.back().begin(), pieces.back().end());
    begin = c;
  }
  const std::vector<int32_t> whole = tokenize(text);
  if (joined == whole) return pieces;
  // The tokenizer merges across a boundary: split the whole text's tokens by where they start
  // and end; a token overlapping a response (odd piece) belongs to it, so every response
  // character is scored.
  const std::vector<size_t> start = token_offsets(whole, text);
  for (auto& p : pieces) p.clear();
  for (size_t t = 0; t < whole.size(); ++t) {
    const size_t s = start[t], e = start[t + 1];
    size_t k = static_cast<size_t>(std::upper_bound(cuts.begin(), cuts.end(), s) - cuts.begin());
    k = std::min(k, cuts.size() - 1);
    if (k % 2 == 0 && k + 1 < cuts.size() && e > cuts[k]) ++k;  // reaches into the response
    pieces[k].push_back(whole[t]);
  }
  return pieces;
}

// The character offset where each token of ids starts in text, plus text.size() at the end.
// A token's text is its bytes (a special token its content); a SentencePiece dummy-prefix space
// at the start of the text or after a special token is not in the text. DataError when the
// tokens do not spell the text (offsets unknown).
std::vector<size_t> JinjaChatTemplate::token_offsets(const std::vector<int32_t>& ids,
                                                     const std::string& text) const {
  std::vector<size_t> start;
  size_t pos = 0;
  bool segment_start = true;
  for (int32_t id : ids) {
    const bool special = tok_.is_special(id);
    std::string b = special ? tok_.id_to_token(id) : tok_.token_bytes(id);
    if (!special && segment_start && !b.empty() && b[0] == ' ' &&
        text.compare(pos, b.size(), b) != 0)
      b.erase(0, 1);
    if (text.compare(pos, b.size(), b) != 0)
      UNILLM_THROW(DataError, "[template] ", origin_,
                   ": the tokenizer merges text across a prompt/response boundary and its tokens "
                   "do not map back to character offsets (at byte ",
                   pos, "); name a built-in template instead");
    start.push_back(pos);
    pos += b.size();
    segment_start = special;
  }
  if (pos != text.size())
    UNILLM_THROW(DataError, "[template] ", origin_, ": the tokens cover ", pos, " of ", text.size(),
                 " bytes of the rendered text");
  start.push_back(pos);
  return start;
}

EncodedTurn JinjaChatTemplate::oneturn(const std::vector<Message>& messages,
                                       const std::string& system, const std::string& tools) const {
  std::vector<EncodedTurn> turns = encode_multiturn(messages, system, false, tools);
  EncodedTurn out;
  for (size_t i = 0; i < turns.size(); ++i) {
    out.prompt.insert(out.prompt.end(), turns[i].prompt.begin(), turns[i].prompt.end());
    if (i + 1 < turns.size())
      out.prompt.insert(out.prompt.end(), turns[i].response.begin(), turns[i].response.end());
  }
  out.response = std::move(turns.back().response);
  return out;
}

}  // namespace unillm::data
