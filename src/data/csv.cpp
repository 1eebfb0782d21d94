// parse_csv (data/csv.h).
#include "data/csv.h"

#include "data/error.h"

namespace unillm::data {

std::vector<CsvRow> parse_csv(const std::string& text, const std::string& path) {
  std::vector<CsvRow> rows;
  CsvRow row;
  std::string field;
  int64_t line = 1;
  row.line = 1;
  bool quoted = false, was_quoted = false, any = false;  // any: the row has a character or a separator
  auto end_field = [&] {
    row.fields.push_back(field);
    field.clear();
    was_quoted = false;
  };
  auto end_row = [&] {
    if (any) {
      end_field();
      rows.push_back(row);
    }
    row = CsvRow{};
    row.line = line;
    field.clear();
    any = was_quoted = false;
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"') {
        if (i + 1 < text.size() && text[i + 1] == '"') {
          field += '"';
          ++i;
        } else {
          quoted = false;
          was_quoted = true;
        }
      } else {
        if (c == '\n') ++line;
        field += c;
      }
      continue;
    }
    if (c == '"' && field.empty() && !was_quoted) {
      quoted = any = true;
    } else if (c == ',') {
      end_field();
      any = true;
    } else if (c == '\n' || (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n')) {
      if (c == '\r') ++i;
      ++line;
      end_row();
    } else if (was_quoted) {
      UNILLM_THROW(DataError, "[data] ", path, " line ", line, ": text after a closing quote");
    } else {
      field += c;
      any = true;
    }
  }
  if (quoted) UNILLM_THROW(DataError, "[data] ", path, " line ", row.line, ": a quoted field is not closed");
  end_row();
  return rows;
}

}  // namespace unillm::data
