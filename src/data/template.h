// Chat templates by name, as LLaMA-Factory's `template:` key (its data/template.py): a template
// renders a conversation into token ids with prompt/response spans, so SFT masking is exact and
// `unillm chat` builds its prompts the same way the model was trained.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/tokenizer.h"

namespace unillm::data {

enum class Role { kUser, kAssistant, kSystem, kFunction, kObservation };

struct Message {
  Role role = Role::kUser;
  std::string content;
};

// One (prompt, response) pair of a conversation: the ids of everything before the response
// (system/prefix on the first turn, the user turn, the assistant header) and of the response
// (its text, its end-of-turn marker, and EOS when the template appends it).
struct EncodedTurn {
  std::vector<int32_t> prompt;
  std::vector<int32_t> response;
};

// One element of a formatter's slot list (LLaMA-Factory's SLOTS): text with "{{content}}" /
// "{{idx}}" placeholders, or the tokenizer's BOS / EOS ({"bos_token"} / {"eos_token"}; EOS is the
// template's replacement when replace_eos), or one named token ({"token": "..."}).
struct TemplateSlot {
  enum class Kind { kText, kBos, kEos, kToken };
  Kind kind = Kind::kText;
  std::string text;  // the text, or the token name for kToken
};
using TemplateSlots = std::vector<TemplateSlot>;

// How a template places the system prompt and thoughts (LLaMA-Factory's template classes).
enum class TemplateClass {
  kPlain,   // Template: prefix + system slots + user slots on the first message
  kLlama2,  // Llama2Template: the first formatted system slot is glued before the first user text;
            // function messages are parsed without thought / tool-call words
  kReasoning,       // ReasoningTemplate: adds an empty thought ("<think>\n\n</think>\n\n") per turn
  kGlm47Reasoning,  // Glm47ReasoningTemplate: as kReasoning, the empty thought is the close word
  kMossVl,  // MossVLTemplate: as kPlain, the tool text loses its leading newlines when the system
            // prompt is empty
};

// A template's definition, the arguments of LLaMA-Factory's register_template after its
// defaults (assistant = {{content}} + EOS unless efficient_eos, system = {{content}},
// observation = the user format, function = the assistant slots with the default tool format).
// The built-in rows are generated from LLaMA-Factory's template.py (tools/gen_template_defs.py).
struct TemplateDef {
  std::string name;
  TemplateSlots format_user, format_assistant, format_system, format_observation, format_prefix;
  // FunctionFormatter: a function-call message's {"name", "arguments"} JSON (or a list of them)
  // rendered by function_format's function formatter, then put into these slots.
  TemplateSlots format_function;
  std::string function_format = "default";
  // ToolFormatter: the tools JSON rendered by tool_format's tool formatter and appended to the
  // system prompt; when format_tools has slots (a StringFormatter, phi4_mini) the raw tools JSON
  // goes into them instead.
  std::string tool_format = "default";
  TemplateSlots format_tools;
  std::string default_system;
  std::vector<std::string> stop_words;
  bool efficient_eos = false;  // EOS is appended by the SFT encoder, not by format_assistant
  bool replace_eos = false;    // stop_words[0] becomes the EOS (LLaMA-Factory fix_special_tokens)
  TemplateClass template_class = TemplateClass::kPlain;
  std::string thought_open = "<think>\n", thought_close = "\n</think>\n\n";
  std::string tool_call_open = "<tool_call>", tool_call_close = "</tool_call>";
  std::string mm_plugin;  // LLaMA-Factory's multimodal plugin name; recorded, not applied
};

// Per-run settings that LLaMA-Factory takes from DataArguments.
struct TemplateOptions {
  // enable_thinking (LLaMA-Factory's default true; nullopt = its None). Reasoning templates only:
  // true puts the empty thought of a turn without one into the scored response; false/None put it
  // into the prompt (unscored); false also strips existing thoughts from every response.
  std::optional<bool> enable_thinking = true;
  // preserve_thinking (reasoning templates): encode_oneturn / encode_prompt keep the thoughts of
  // earlier responses instead of stripping them.
  bool preserve_thinking = false;
  std::optional<std::string> default_system;  // overrides the template's default_system
  // LLaMA-Factory's tool_format: replaces the template's tool and function formats (function
  // slots become {{content}} + EOS, or {{content}} with efficient_eos).
  std::optional<std::string> tool_format;
  // The date the llama3 tool prompt names ("%d %b %Y"); "" = today.
  std::string tool_date;
};

class ChatTemplate {
 public:
  // The named template bound to a tokenizer (which must outlive it). Names as LLaMA-Factory's:
  // default, empty, alpaca, vicuna, llama2, llama3, qwen, qwen3, … Throws ConfigError naming the
  // unknown template and listing the known ones ("auto"/Jinja templates are not supported), or
  // when the tokenizer lacks a token the template needs (e.g. <|eot_id|> for llama3).
  static std::unique_ptr<ChatTemplate> by_name(const std::string& name, const io::Tokenizer& tok,
                                               const TemplateOptions& options = {});
  // A template from an explicit definition (custom templates; the same checks as by_name).
  static std::unique_ptr<ChatTemplate> from_def(const TemplateDef& def, const io::Tokenizer& tok,
                                                const TemplateOptions& options = {});
  static std::vector<std::string> names();
  virtual ~ChatTemplate() = default;

  const std::string& name() const { return name_; }
  // The definition after options (tool_format, default_system) were applied.
  virtual const TemplateDef& def() const = 0;
  // messages alternate user|observation and assistant|function, starting with user (as
  // LLaMA-Factory's sharegpt tags allow); an even count (DataError otherwise). A function message
  // holds the call as JSON, {"name": ..., "arguments": {...}} or a list of them (optionally
  // wrapped in the template's thought or tool-call words), rendered by the template's function
  // format; DataError for JSON that is not a call. system "" means the template's default system.
  // tools: "" or a JSON list of tool schemas, rendered into the first system prompt by the
  // template's tool format (DataError for bad JSON, NotImplemented for a tool format unillm lacks).
  // Returns one EncodedTurn per (user, assistant) pair, as LLaMA-Factory's encode_multiturn.
  // discard_history_thought (reasoning templates; LLaMA-Factory's discarding_history_cot, which its
  // SFT processor sets with mask_history): strips the thoughts of all but the last response and
  // adds the empty thought to the last turn only.
  virtual std::vector<EncodedTurn> encode_multiturn(const std::vector<Message>& messages,
                                                    const std::string& system,
                                                    bool discard_history_thought,
                                                    const std::string& tools) const = 0;
  std::vector<EncodedTurn> encode_multiturn(const std::vector<Message>& messages,
                                            const std::string& system,
                                            bool discard_history_thought) const {
    return encode_multiturn(messages, system, discard_history_thought, "");
  }
  std::vector<EncodedTurn> encode_multiturn(const std::vector<Message>& messages,
                                            const std::string& system) const {
    return encode_multiturn(messages, system, false, "");
  }
  // LLaMA-Factory's Template.encode_oneturn (ReasoningTemplate's for reasoning templates): the
  // messages (as encode_multiturn's) through encode_multiturn with discard_history_thought
  // (unless preserve_thinking); prompt = every turn's ids laid end to end except the last
  // response (earlier responses are part of the prompt), response = the last response's ids. The
  // pairwise (rm/dpo) encoder uses it for prompt + chosen and prompt + rejected.
  EncodedTurn encode_oneturn(const std::vector<Message>& messages, const std::string& system,
                             const std::string& tools = "") const {
    return oneturn(messages, system, tools);
  }
  // The prompt for generating the next assistant turn: messages has an odd count and ends with
  // a user or observation message (LLaMA-Factory's encode_oneturn with an empty response, prompt
  // part; reasoning templates strip the thoughts of earlier responses unless preserve_thinking,
  // and append the empty thought unless enable_thinking is true).
  virtual std::vector<int32_t> encode_prompt(const std::vector<Message>& messages,
                                             const std::string& system,
                                             const std::string& tools) const = 0;
  std::vector<int32_t> encode_prompt(const std::vector<Message>& messages,
                                     const std::string& system) const {
    return encode_prompt(messages, system, "");
  }
  // Ids that end a generated turn: the template's stop words plus the (possibly replaced) EOS
  // (LLaMA-Factory's get_stop_token_ids). Stop words the vocabulary lacks are left out (LLaMA-
  // Factory would add them as new tokens). Sorted, unique.
  virtual std::vector<int32_t> stop_ids() const = 0;
  // The EOS id training appends (the template's replacement EOS when it has one).
  virtual int32_t eos_id() const = 0;
  // LLaMA-Factory's efficient_eos: EOS is appended to responses by the data processor rather
  // than being part of the assistant format.
  virtual bool efficient_eos() const = 0;

 protected:
  virtual EncodedTurn oneturn(const std::vector<Message>& messages, const std::string& system,
                              const std::string& tools) const = 0;
  std::string name_;
};

// The definition of a built-in template; nullptr for an unknown name.
const TemplateDef* find_template_def(const std::string& name);

// The built-in template whose rendering a model's Jinja chat_template matches, for the ones we
// can map: Qwen2's ChatML template (tokenizer_config.json of Qwen2-Instruct) -> "qwen", Meta
// Llama 3 Instruct's -> "llama3"; "" otherwise. Caveats (the ids can still differ): Qwen2's Jinja
// default system is "You are a helpful assistant." while LLaMA-Factory's qwen default is the
// Qwen2.5 one; Llama 3's Jinja trims message content, the llama3 template does not.
std::string recognize_jinja_template(const std::string& jinja);
// The default system prompt of a recognised Jinja template (as LLaMA-Factory's parse_template
// extracts it); nullopt when the template is not recognised.
std::optional<std::string> jinja_default_system(const std::string& jinja);

}  // namespace unillm::data
