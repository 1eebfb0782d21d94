// Code-point text helpers for the metrics: Python's metric code works on str (code points), so
// jieba, ROUGE and BLEU here work on std::u32string and convert at the edges.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace unillm::eval {

// UTF-8 -> code points. Each ill-formed byte becomes U+FFFD (never throws on text).
std::u32string utf8_to_u32(std::string_view s);
std::string u32_to_utf8(std::u32string_view s);

// Python's str.isspace() / the `\s` of a str regex (Py_UNICODE_ISSPACE): the ASCII whitespace
// plus U+001C..001F, U+0085, U+00A0, U+1680, U+2000..200A, U+2028, U+2029, U+202F, U+205F, U+3000.
bool is_py_space(char32_t c);

// Python's s.split() with no argument: runs of is_py_space separate, empty pieces dropped.
std::vector<std::u32string> py_split_ws(std::u32string_view s);

}  // namespace unillm::eval
