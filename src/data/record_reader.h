// Reads the documents of one dataset (txt / json / jsonl files) as LLaMA-Factory's loader and
// alpaca converter see them for stage pt: one document per line of a .txt file; one per object
// of a .json array or a JSON-lines file, its text = prompt column ["\n" + query column].
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "data/dataset_info.h"

namespace unillm::data {

class NumpyRandomState;

struct ReadOptions {
  std::optional<int64_t> max_samples;  // keep the first N rows of the dataset (all its files)
  bool skip_bad_records = false;       // skip malformed records (counted) instead of throwing
  // numpy's global generator as LLaMA-Factory's loader finds it (data/num_samples.h); datasets with
  // num_samples draw from it, so one generator goes through a load's datasets in order.
  NumpyRandomState* sampling = nullptr;
};

struct DocumentSet {
  std::vector<std::string> texts;          // in file order; empty documents already dropped
  int64_t rows = 0;                        // rows seen (what max_samples counts), incl. empty ones
  int64_t skipped_records = 0;             // bad records skipped (skip_bad_records only)
  std::vector<std::string> skip_messages;  // the first few skip reasons, for the log
};

// Throws DataError "[data] FILE line N: ..." on the first bad record unless skip_bad_records.
// Bad records: invalid JSON, a non-object, a missing or non-string text column, invalid UTF-8 in
// a .txt line, a file with no records.
DocumentSet read_documents(const DatasetAttr& attr, const ReadOptions& opts);

// Whether s is well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
bool valid_utf8(std::string_view s);
// Length of the line break at s[i] as Python's str.splitlines sees it (0 if none): \n, \r,
// \r\n, \v, \f, \x1c-\x1e, U+0085, U+2028, U+2029. HF's text loader splits lines this way.
size_t line_break_at(std::string_view s, size_t i);

}  // namespace unillm::data
