// txt / json / jsonl readers with file-and-line errors (see record_reader.h).
#include "data/record_reader.h"

#include <nlohmann/json.hpp>
#include <string_view>

#include "data/error.h"
#include "data/num_samples.h"
#include "io/json_file.h"

namespace unillm::data {
using nlohmann::json;

namespace {

constexpr size_t kMaxSkipMessages = 5;

// One raw record: its text and the 1-based line where it starts.
struct RawRecord {
  std::string_view text;
  int64_t line;
};

class Collector {
 public:
  Collector(const DatasetAttr& attr, const ReadOptions& opts, DocumentSet& out)
      : attr_(attr), opts_(opts), out_(out) {}

  bool full() const { return opts_.max_samples && out_.rows >= *opts_.max_samples; }

  void bad(const std::string& file, int64_t line, const std::string& what) {
    std::string msg = UNILLM_MSG("[data] ", file, line > 0 ? " line " : "",
                                 line > 0 ? std::to_string(line) : std::string(), ": ", what);
    if (!opts_.skip_bad_records) throw DataError(msg);
    ++out_.skipped_records;
    if (out_.skip_messages.size() < kMaxSkipMessages) out_.skip_messages.push_back(msg);
  }

  void add(std::string text) {
    ++out_.rows;
    if (text.empty()) return;
    out_.texts.push_back(std::move(text));
    item_rows.push_back(out_.rows - 1);
  }

  // A JSON record: the prompt column, then "\n" + the query column when both are non-empty.
  void add_json(const std::string& file, const RawRecord& r) {
    json obj = json::parse(r.text, nullptr, /*allow_exceptions=*/false);
    if (obj.is_discarded()) return bad(file, r.line, "invalid JSON");
    if (!obj.is_object()) return bad(file, r.line, "expected a JSON object");
    const std::string& key = attr_.prompt_column;
    if (!obj.contains(key)) return bad(file, r.line, "key '" + key + "' missing");
    if (!obj[key].is_string())
      return bad(file, r.line,
                 "key '" + key + "' is not a string (got " + obj[key].type_name() + ")");
    std::string text = obj[key].get<std::string>();
    if (attr_.query_column && obj.contains(*attr_.query_column)) {
      const json& q = obj[*attr_.query_column];
      if (!q.is_null() && !q.is_string())
        return bad(file, r.line, "key '" + *attr_.query_column + "' is not a string");
      if (q.is_string() && !q.get<std::string>().empty())
        text = text.empty() ? q.get<std::string>() : text + "\n" + q.get<std::string>();
    }
    add(std::move(text));
  }

 std::vector<int64_t> item_rows;  // the row of each document kept

 private:
  const DatasetAttr& attr_;
  const ReadOptions& opts_;
  DocumentSet& out_;
};

}  // namespace

// Shared with the streaming corpus builder (corpus_build.cpp), so both split text identically.
bool valid_utf8(std::string_view s) {
  static const uint32_t kMin[4] = {0, 0x80, 0x800, 0x10000};
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t n;
    uint32_t cp;
    if ((c >> 5) == 6)
      n = 1, cp = c & 0x1F;
    else if ((c >> 4) == 14)
      n = 2, cp = c & 0x0F;
    else if ((c >> 3) == 30)
      n = 3, cp = c & 0x07;
    else
      return false;
    if (i + n >= s.size()) return false;
    for (size_t k = 1; k <= n; ++k) {
      auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc >> 6) != 2) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

// Length of the line break at s[i] as Python's str.splitlines sees it (0 if none): \n, \r, \r\n,
// \v, \f, \x1c-\x1e, U+0085, U+2028, U+2029. HF's text loader splits lines with splitlines.
size_t line_break_at(std::string_view s, size_t i) {
  auto c = static_cast<unsigned char>(s[i]);
  if (c == '\r') return (i + 1 < s.size() && s[i + 1] == '\n') ? 2 : 1;
  if (c == '\n' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E)) return 1;
  if (c == 0xC2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x85) return 2;
  if (c == 0xE2 && i + 2 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x80) {
    auto d = static_cast<unsigned char>(s[i + 2]);
    if (d == 0xA8 || d == 0xA9) return 3;
  }
  return 0;
}

namespace {

void read_txt(const std::string& file, const std::string& bytes, Collector& c) {
  if (!valid_utf8(bytes)) {
    // Find the first bad physical line to name it.
    int64_t line = 1;
    size_t start = 0;
    for (size_t i = 0; i <= bytes.size(); ++i) {
      if (i == bytes.size() || bytes[i] == '\n') {
        if (!valid_utf8(std::string_view(bytes).substr(start, i - start)))
          return c.bad(file, line, "invalid UTF-8");
        start = i + 1;
        ++line;
      }
    }
    return c.bad(file, 0, "invalid UTF-8");
  }
  std::string_view s(bytes);
  size_t start = 0;
  for (size_t i = 0; i < s.size() && !c.full();) {
    size_t br = line_break_at(s, i);
    if (br == 0) {
      ++i;
      continue;
    }
    c.add(std::string(s.substr(start, i - start)));
    i += br;
    start = i;
  }
  if (start < s.size() && !c.full()) c.add(std::string(s.substr(start)));
}

// Splits a top-level JSON array into its elements without parsing them, so each element's line
// is known; returns false when the text is not a well-bracketed array.
bool split_json_array(std::string_view s, std::vector<RawRecord>& out, int64_t& err_line) {
  int64_t line = 1;
  size_t i = 0;
  auto skip_ws = [&] {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r'))
      line += s[i++] == '\n';
  };
  skip_ws();
  if (i >= s.size() || s[i] != '[') return false;
  ++i;
  int depth = 0;
  bool in_str = false;
  size_t start = std::string_view::npos;
  int64_t start_line = 0;
  for (; i < s.size(); ++i) {
    char ch = s[i];
    if (ch == '\n') ++line;
    if (in_str) {
      if (ch == '\\')
        ++i;
      else if (ch == '"')
        in_str = false;
      continue;
    }
    if (start == std::string_view::npos && !(ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r')) {
      if (ch == ']' && depth == 0 && out.empty()) return true;  // "[]"
      start = i;
      start_line = line;
    }
    if (ch == '"')
      in_str = true;
    else if (ch == '[' || ch == '{')
      ++depth;
    else if ((ch == ']' || ch == '}') && depth > 0)
      --depth;
    else if (depth == 0 && (ch == ',' || ch == ']')) {
      if (start == i) {
        err_line = line;
        return false;
      }  // empty element
      out.push_back({s.substr(start, i - start), start_line});
      start = std::string_view::npos;
      if (ch == ']') return true;
    }
  }
  err_line = line;
  return false;
}

void read_json(const std::string& file, const std::string& bytes, Collector& c) {
  size_t first = bytes.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && bytes[first] == '[') {  // a JSON array file
    std::vector<RawRecord> recs;
    int64_t err_line = 0;
    if (!split_json_array(bytes, recs, err_line))
      return c.bad(file, err_line, "invalid JSON array");
    for (const auto& r : recs) {
      if (c.full()) break;
      c.add_json(file, r);
    }
    return;
  }
  // JSON lines; blank lines are not records.
  std::string_view s(bytes);
  int64_t line = 0;
  size_t pos = 0;
  while (pos < s.size() && !c.full()) {
    size_t nl = s.find('\n', pos);
    std::string_view ln = s.substr(pos, nl == std::string_view::npos ? s.size() - pos : nl - pos);
    ++line;
    pos = nl == std::string_view::npos ? s.size() : nl + 1;
    if (ln.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    c.add_json(file, {ln, line});
  }
}

}  // namespace

DocumentSet read_documents(const DatasetAttr& attr, const ReadOptions& opts) {
  DocumentSet out;
  const ReadOptions all = read_all_rows_if_sampled(attr, opts);
  Collector c(attr, all, out);
  for (const auto& file : attr.files) {
    if (c.full()) break;
    std::string bytes;
    try {
      bytes = io::read_file_bytes(file);
    } catch (const IoError&) {
      throw DataError(UNILLM_MSG("[data] ", file, ": cannot read file"));
    }
    const int64_t before = out.rows + out.skipped_records;
    if (attr.file_type == "txt")
      read_txt(file, bytes, c);
    else
      read_json(file, bytes, c);
    if (out.rows + out.skipped_records == before) c.bad(file, 0, "empty file (no records)");
  }
  apply_num_samples(attr, opts, out.texts, c.item_rows, out.rows);
  return out;
}

}  // namespace unillm::data
