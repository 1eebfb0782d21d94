// A model's own Jinja chat_template (tokenizer_config.json) as a ChatTemplate, rendered with
// transformers' apply_chat_template semantics, so `chat`, `serve` and SFT data work for models
// whose template matches no built-in row (issue 18; docs/templates.md "A model's own chat
// template").
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/template.h"
#include "io/jinja/jinja.h"
#include "io/tokenizer.h"

namespace unillm::data {

// The `template:` name that selects the model's own chat_template (LLaMA-Factory has no such
// name: it renders Jinja only through transformers). choose_template also returns it when the
// chat_template maps to no built-in row.
inline constexpr const char* kJinjaTemplateName = "jinja";

// Rendering (transformers 4.46 apply_chat_template): context = the tokenizer's special tokens
// as strings (special_tokens_map: bos_token, eos_token, unk/sep/pad/cls/mask_token,
// additional_special_tokens; tokenizer_config.json overridden by special_tokens_map.json, unset
// ones left out) + messages + tools (null when none) + documents (null) + add_generation_prompt
// (+ enable_thinking when the option has a value). The text is tokenised with special tokens
// parsed and nothing added (apply_chat_template's add_special_tokens=False).
// Messages: {"role": "system"} first when a system prompt is given (or options.default_system),
// user / assistant as they are, a function message as {"role": "assistant", "content": "",
// "tool_calls": [{"type": "function", "function": {"name", "arguments"}}]}, an observation as
// {"role": "tool", "content"}. Tools: each element of the JSON list is passed as an OpenAI tool,
// {"type": "function", "function": elem} unless it already is one.
// Turn spans (encode_multiturn): prompt_i = render(messages[:2i+1], add_generation_prompt),
// full_i = render(messages[:2i+2]); each must extend the previous text (else DataError naming
// the template and the turn: the template rewrites history, e.g. drops earlier thoughts). The ids
// are always tokenize(whole text): when tokenising the pieces apart gives other ids (a merge
// across a boundary), the whole text's tokens are split by their character offsets, a token
// overlapping a response belonging to that response.
class JinjaChatTemplate final : public ChatTemplate {
 public:
  // source: the Jinja text; special_tokens: the special_tokens_map entries (see above); origin
  // names the template in errors ("DIR/tokenizer_config.json"). Throws ConfigError for a template
  // that does not parse or for options that do not apply (tool_format).
  JinjaChatTemplate(const std::string& source, nlohmann::ordered_json special_tokens,
                    const io::Tokenizer& tok, const TemplateOptions& options, std::string origin);
  // From a model dir's tokenizer_config.json (chat_template a string, or a list of {name,
  // template} with a "default") and special_tokens_map.json. ConfigError when it has none.
  static std::unique_ptr<JinjaChatTemplate> load(const std::string& model_dir,
                                                 const io::Tokenizer& tok,
                                                 const TemplateOptions& options = {});

  using ChatTemplate::encode_multiturn;
  using ChatTemplate::encode_prompt;
  // name "jinja"; tool_format guessed from the source (for reading tool calls out of replies):
  // qwen for <tool_call>, mistral for [TOOL_CALLS], llama3 for <|python_tag|>, else default.
  const TemplateDef& def() const override { return def_; }
  // discard_history_thought is ignored: the Jinja decides what earlier turns render as.
  std::vector<EncodedTurn> encode_multiturn(const std::vector<Message>& messages,
                                            const std::string& system, bool discard_history_thought,
                                            const std::string& tools) const override;
  std::vector<int32_t> encode_prompt(const std::vector<Message>& messages,
                                     const std::string& system,
                                     const std::string& tools) const override;
  // The tokenizer's stop ids: eos_token plus generation_config.json's eos_token_id list.
  std::vector<int32_t> stop_ids() const override { return tok_.stop_ids(); }
  int32_t eos_id() const override { return tok_.eos_id(); }
  bool efficient_eos() const override { return false; }  // the Jinja writes each turn's end
  // The rendered text (transformers' apply_chat_template(tokenize=False)); messages as above,
  // any count and order the template accepts.
  std::string render(const std::vector<Message>& messages, const std::string& system,
                     const std::string& tools, bool add_generation_prompt) const;
  // The same from messages already in transformers' form ({role, content[, tool_calls]
  // [, reasoning_content]}) and tools (a JSON list of OpenAI tools, or null): what LLaMA-Factory
  // v1's renderer passes (data/v1_data.h).
  std::string render_json(const nlohmann::ordered_json& messages,
                          const nlohmann::ordered_json& tools, bool add_generation_prompt) const;
  // apply_chat_template's tokenisation of a rendered text: special tokens parsed, none added.
  std::vector<int32_t> tokenize(const std::string& text) const;
  // The chat_template of a model dir's tokenizer_config.json, or `fallback` (a Jinja source)
  // when it has none; load() otherwise.
  static std::unique_ptr<JinjaChatTemplate> load_or(const std::string& model_dir,
                                                    const io::Tokenizer& tok,
                                                    const TemplateOptions& options,
                                                    const std::string& fallback);

 private:
  EncodedTurn oneturn(const std::vector<Message>& messages, const std::string& system,
                      const std::string& tools) const override;
  nlohmann::ordered_json hf_messages(const std::vector<Message>& messages,
                                     const std::string& system) const;
  nlohmann::ordered_json hf_tools(const std::string& tools) const;
  // The ids of text cut at the character offsets cuts (ascending, last = text.size()): one id
  // list per piece, together tokenize(text).
  std::vector<std::vector<int32_t>> split(const std::string& text,
                                          const std::vector<size_t>& cuts) const;
  std::vector<size_t> token_offsets(const std::vector<int32_t>& ids, const std::string& text) const;

  jinja::Template jinja_;
  nlohmann::ordered_json specials_;
  const io::Tokenizer& tok_;
  TemplateOptions opt_;
  TemplateDef def_;
  std::string origin_;
};

}  // namespace unillm::data
