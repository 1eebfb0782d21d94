// A template written out for other runtimes, as LLaMA-Factory's export does: a Jinja
// `chat_template` for tokenizer_config.json (Template._get_jinja_template) and an Ollama
// Modelfile (get_ollama_modelfile).
#pragma once

#include <optional>
#include <string>

#include "data/template.h"

namespace unillm::data {

// The Jinja chat template of t: prefix, the default system prompt, the system slot when a system
// message (or the default) exists, then each user / assistant message through its slots
// (Llama2Template glues the system text into the first message). BOS/EOS slots become the
// tokenizer's token texts (EOS: the replacement stop word for replace_eos templates). nullopt
// when a slot names a token (LLaMA-Factory: "Dict is not supported"; the model's own template is
// kept then).
std::optional<std::string> jinja_chat_template(const ChatTemplate& t, const io::Tokenizer& tok);
// LLaMA-Factory's replace_jinja_template: whether exporting with this template replaces a
// chat_template the tokenizer already has (otherwise only a missing one is written).
bool replaces_jinja_template(const std::string& template_name);
// The Ollama Modelfile: FROM ., TEMPLATE (Go template syntax), SYSTEM (the default system
// prompt), a PARAMETER stop per stop id, PARAMETER num_ctx 4096. Named-token slots are left out.
std::string ollama_modelfile(const ChatTemplate& t, const io::Tokenizer& tok);
// The built-in template whose jinja_chat_template (with this tokenizer) is exactly `jinja`: a
// model exported by unillm or LLaMA-Factory chats with the template it was trained with. "" when
// none is.
std::string template_of_exported_jinja(const std::string& jinja, const io::Tokenizer& tok);

}  // namespace unillm::data
