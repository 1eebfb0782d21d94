// `unillm tokenize`: the ids of a text as one JSON list on one line.
#include <cstdio>

#include "cli/commands.h"
#include "core/error.h"
#include "cli/common.h"

namespace unillm::cli {

int cmd_tokenize(const std::vector<std::string>& args) {
  std::string model, text, file;
  bool parse_special = false, no_special = false;
  ArgParser p("tokenize", "Print the token ids of a text (BOS included when the tokenizer adds it).");
  p.option("model", "model or tokenizer dir", &model);
  p.option("text", "the text", &text);
  p.option("file", "read the text from this file (verbatim)", &file);
  p.flag("parse-special", "special-token strings in the text become special tokens", &parse_special);
  p.flag("no-special-tokens", "do not add BOS/EOS", &no_special);
  if (!p.parse(args)) return print_help(p);
  p.require("model");
  if (p.given("text") == p.given("file"))
    UNILLM_THROW(ConfigError, "[tokenize] give exactly one of --text and --file");
  if (p.given("file")) text = read_text_file(file);
  auto tok = io::Tokenizer::load(model);
  io::EncodeOptions o;
  o.parse_special = parse_special;
  o.add_special_tokens = !no_special;
  std::string line = ids_json(tok->encode(text, o)) + "\n";
  std::fwrite(line.data(), 1, line.size(), stdout);
  return 0;
}

}  // namespace unillm::cli
