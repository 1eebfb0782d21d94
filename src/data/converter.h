// What the LLaMA-Factory record readers share (sft_reader.cpp, preference_reader.cpp): the record
// loop over .json / .jsonl files with "[data] FILE line N: ..." errors, skipping and max_samples,
// and the common parts of its converters (data/converter.py: alpaca prompt, sharegpt turns).
// Internal to src/data.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"
#include "data/dataset_info.h"
#include "data/record_reader.h"  // ReadOptions
#include "data/template.h"       // Message

namespace unillm::data {

// Thrown by a converter for a bad record; the loop adds file and line.
struct BadRecord {
  std::string what;
};
[[noreturn]] void bad(std::string what);

std::string quoted(const std::string& s);  // 'key'

// Whether a sharegpt/openai tag is set and names this role.
inline bool tag_is(const std::optional<std::string>& tag, const std::string& role) { return tag && *tag == role; }

// obj[key] or nullptr when absent.
const nlohmann::json* find_key(const nlohmann::json& obj, const std::string& key);

// A text value: a string, or null / absent ("" then) unless required (BadRecord otherwise).
std::string text_or_empty(const nlohmann::json& obj, const std::string& key, bool required);

// A response text: present, not null, a string, non-empty (BadRecord naming the key otherwise).
std::string response_text(const nlohmann::json& obj, const std::string& key);

// Tool definitions are not rendered yet: only an absent/null/empty tools value is accepted.
void check_no_tools(const nlohmann::json& obj, const std::optional<std::string>& key);

// LLaMA-Factory's AlpacaDatasetConverter prompt: history pairs (user, assistant)… + user(prompt
// ["\n" + query], each part only when non-empty).
std::vector<Message> alpaca_prompt(const nlohmann::json& obj, const SftColumns& c);

// One sharegpt message's (role, content) strings; `where` names it in errors ("sharegpt turn 3").
std::pair<std::string, std::string> sharegpt_message(const nlohmann::json& m, const SharegptTags& t,
                                                     const std::string& where);

// The messages list of a sharegpt record as LLaMA-Factory's SharegptDatasetConverter aligns it:
// a first message whose role is tags.system_tag becomes the system (else the system column); the
// rest must alternate user|observation (1st, 3rd, …) and assistant|function (2nd, 4th, …).
// The count is not checked here (sft wants it even, ranking odd).
struct SharegptTurns {
  std::vector<Message> messages;
  std::string system;
  bool had_system_message = false;
  size_t list_size = 0;  // entries of the record's list, the system message included
};
SharegptTurns sharegpt_turns(const nlohmann::json& obj, const DatasetAttr& attr);

// formatting: openai (LLaMA-Factory's OpenAIDatasetConverter; openai_converter.cpp): the same
// system rule, then an assistant or function message with non-empty `tool_calls` becomes a
// function turn holding json.dumps of their `function` objects (its content may then be null),
// consecutive observation-tag messages (tool results) one observation turn joined by
// "\n</tool_response>\n<tool_response>\n", and the aligned turns must alternate as in sharegpt.
// Tool results after the last turn (which LLaMA-Factory drops) are a BadRecord.
SharegptTurns openai_turns(const nlohmann::json& obj, const DatasetAttr& attr);
// sharegpt_turns or openai_turns by attr.formatting.
SharegptTurns message_turns(const nlohmann::json& obj, const DatasetAttr& attr);
// LLaMA-Factory's openai converter also sets the system prompt for Nemotron's reasoning switch:
// without a tools value, "detailed thinking off" becomes the system prompt when it is empty, or is
// appended after "\n" unless it already says "detailed thinking on|off"; with tools a non-empty
// system prompt gets a trailing "\n". No-op for other formattings.
void openai_system_prompt(const nlohmann::json& obj, const DatasetAttr& attr, std::string& system);

// The Role of an assistant-side sharegpt role string (assistant or function tag), or BadRecord
// "<where> has role 'x', expected an assistant turn".
Role sharegpt_response_role(const SharegptTags& t, const std::string& role,
                            const std::string& where);

// Bad-record bookkeeping shared by the readers.
// The converter of attr's formatting: alpaca(obj, attr, example) or sharegpt(obj, attr, example)
// (also for openai: sharegpt converters read their turns through message_turns),
// bound to attr (which must outlive it). Throws ConfigError for a sharegpt dataset without a
// messages column or role/content tags, NotImplemented for another formatting.
template <class Example, class Alpaca, class Sharegpt>
std::function<void(const nlohmann::json&, Example&)> converter_for(const DatasetAttr& attr, Alpaca alpaca,
                                                                  Sharegpt sharegpt) {
  if (attr.formatting == "alpaca")
    return [&attr, alpaca](const nlohmann::json& o, Example& e) { alpaca(o, attr, e); };
  if (attr.formatting == "sharegpt" || attr.formatting == "openai") {
    if (!attr.columns.messages || !attr.tags.role_tag || !attr.tags.content_tag)
      UNILLM_THROW(ConfigError, "[data] dataset '", attr.name, "': ", attr.formatting,
                   " needs a messages column, a role tag and a content tag");
    return [&attr, sharegpt](const nlohmann::json& o, Example& e) { sharegpt(o, attr, e); };
  }
  UNILLM_THROW(NotImplemented, "[data] dataset '", attr.name, "': formatting '", attr.formatting,
               "' is not implemented");
}

struct RecordTally {
  int64_t rows = 0;             // records seen (what max_samples counts), bad ones included
  int64_t skipped_records = 0;  // bad records skipped (skip_bad_records only)
  std::vector<std::string> skip_messages;  // the first few skip reasons
};

// Reads .json arrays / JSON lines record by record. For each record that parses as an object,
// visit(obj, source) runs with source = "FILE line N" (N: the line where the record starts); a
// BadRecord it throws, invalid JSON, a non-object, a malformed array or an empty file becomes
// DataError "[data] FILE line N: ..." or, with skip_bad_records, a counted skip. visit keeps
// what it converts; it must throw before keeping anything of a bad record.
class RecordLoop {
 public:
  using Visit = std::function<void(const nlohmann::json& obj, const std::string& source)>;
  explicit RecordLoop(const ReadOptions& opts) : opts_(opts) {}

  bool full() const { return opts_.max_samples && tally_.rows >= *opts_.max_samples; }
  void read_file(const std::string& file, const Visit& visit);
  RecordTally& tally() { return tally_; }

 private:
  void bad_record(const std::string& file, int64_t line, const std::string& what);
  void add(const std::string& file, std::string_view text, int64_t line, const Visit& visit);

  const ReadOptions& opts_;
  RecordTally tally_;
};

}  // namespace unillm::data
