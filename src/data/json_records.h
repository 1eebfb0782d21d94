// Splits a .json / .jsonl file into its records without parsing them, so every record keeps the
// line where it starts (for "[data] FILE line N: ..." messages). Used by the SFT readers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace unillm::data {

struct JsonRecord {
  std::string_view text;  // the record's JSON text (a view into the file's bytes)
  int64_t line = 0;       // 1-based line where the record starts
};

struct JsonRecords {
  std::vector<JsonRecord> records;
  // A malformed JSON array: the line and what is wrong ("no closing ']'", "mismatched ']'", "empty
  // element", "text after the closing ']'"); the records before the fault are kept.
  int64_t error_line = 0;
  std::string error;
};

// A file whose first non-blank byte is '[' is one JSON array: its top-level elements are the
// records. Otherwise it is JSON lines: each non-blank line is a record. Views point into bytes.
JsonRecords split_json_records(std::string_view bytes);

}  // namespace unillm::data
