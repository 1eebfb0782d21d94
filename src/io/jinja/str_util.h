// Python str semantics on UTF-8 std::strings: strip/split/replace/find by code point, and the
// text filters jinja2 defines (title, center, indent, wordcount, escape). Case mapping is ASCII.
#pragma once

#include <string>
#include <vector>

#include "io/jinja/value.h"

namespace unillm::jinja {

bool py_space(const std::string& ch);  // one code point
std::string py_strip(const std::string& s, const std::string* chars, bool left, bool right);
std::vector<std::string> py_split(const std::string& s, const std::string* sep, int64_t maxsplit);
std::string py_replace(const std::string& s, const std::string& old, const std::string& repl,
                       int64_t count);
int64_t py_find(const std::string& s, const std::string& sub,
                const std::string& how);  // find/rfind/count/index
// upper, lower, title, capitalize (strings), splitlines (list), isdigit/isspace/isalpha (bool).
Value str_transform(const std::string& s, const std::string& how);
std::string jinja_title(const std::string& s);  // the `title` filter (differs from str.title)
std::string py_center(const std::string& s, int64_t width);
std::string jinja_indent(const std::string& s, const std::string& unit, bool first, bool blank);
int64_t word_count(const std::string& s);
std::string html_escape(const std::string& s);

}  // namespace unillm::jinja
