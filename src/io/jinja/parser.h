// Parser of Jinja token streams into the syntax tree (ast.h): jinja2's grammar and operator
// precedence for the statements and expressions chat templates use.
#pragma once

#include <string>
#include <vector>

#include "io/jinja/ast.h"
#include "io/jinja/lexer.h"

namespace unillm::jinja {

// Throws ConfigError "[jinja] NAME line N: ..." naming the construct on any syntax error or
// unsupported tag (include, extends, block, import, raw, with, ...).
Body parse_tokens(const std::vector<Token>& tokens, const std::string& name);

}  // namespace unillm::jinja
