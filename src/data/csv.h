// A CSV reader (RFC 4180: comma-separated fields, double quotes around fields that hold commas,
// quotes or line breaks, "" for a quote inside them; \n or \r\n line ends). The evaluation task
// directories of LLaMA-Factory's `eval` (MMLU, CMMLU, C-Eval) hold their questions this way.
#pragma once

#include <string>
#include <vector>

namespace unillm::data {

struct CsvRow {
  std::vector<std::string> fields;
  int64_t line = 0;  // the line the row starts on (1-based), for messages
};

// The rows of text (a file named `path` in messages); empty lines are skipped. DataError naming
// path and line for a quote left open or text after a closing quote.
std::vector<CsvRow> parse_csv(const std::string& text, const std::string& path);

}  // namespace unillm::data
