// Tokenizer of Jinja template source. It applies jinja2's whitespace rules as transformers
// configures them (trim_blocks, lstrip_blocks, '-' and '+' markers, one trailing newline
// dropped, newlines normalised to \n), so the parser only sees text and tag tokens.
#pragma once

#include <string>
#include <vector>

namespace unillm::jinja {

enum class Tok { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };

struct Token {
  Tok kind;
  std::string text;  // Text: the literal; String: decoded value; Name/Op/Int/Float: as written
  int line;
};

// Throws ConfigError "[jinja] NAME line N: ..." on an unterminated tag, comment or string.
std::vector<Token> lex(const std::string& source, const std::string& name);

}  // namespace unillm::jinja
