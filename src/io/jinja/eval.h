// The tree-walking renderer: statements write into a string, expressions yield Values. Scopes
// follow jinja2: a for-loop iteration and a macro call get their own scope, if-blocks do not.
#pragma once

#include <cstdint>
#include <string>

#include "io/jinja/ast.h"
#include "io/jinja/jinja.h"

namespace unillm::jinja {

// Renders `body` with `context` (a dict Value) as the outermost scope. Throws ConfigError
// "[jinja] NAME line N: ..." on any runtime error or exceeded limit.
std::string render_body(const Body& body, const Value& context, const std::string& name,
                        const RenderLimits& limits);

}  // namespace unillm::jinja
