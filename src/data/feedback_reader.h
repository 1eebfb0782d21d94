// KTO feedback records (stage kto): LLaMA-Factory datasets with a bool `kto_tag` column, in the
// alpaca and sharegpt formats (its converter.py kto branch), each record → one prompt, one
// response and whether the response is desirable. Where LLaMA-Factory drops a broken example,
// this reader reports it as an error naming file and line, or skips and counts it with
// ReadOptions::skip_bad_records.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset_info.h"
#include "data/record_reader.h"  // ReadOptions
#include "data/template.h"       // Message

namespace unillm::data {

struct FeedbackExample {
  // Alternating user|observation and assistant|function turns, starting and ending with a user
  // (or observation) turn: LLaMA-Factory's _prompt.
  std::vector<Message> prompt;
  Message response;       // the assistant (or function) turn that is rated
  bool desirable = true;  // the kto_tag value
  std::string system;     // "" = the template's default system prompt
  std::string source;     // "FILE line N" for messages about this record
};

struct FeedbackSet {
  std::vector<FeedbackExample> examples;
  int64_t rows = 0;                        // records seen (what max_samples counts)
  int64_t skipped_records = 0;             // bad records skipped (skip_bad_records only)
  std::vector<std::string> skip_messages;  // the first few skip reasons
};

// Reads every file of a dataset resolved for stage kto (attr.columns.kto_tag set, not ranking;
// .json array or JSON lines), through the same record loop as read_conversations.
//
// alpaca: prompt = history pairs (user, assistant)… + user(prompt ["\n" + query], each part only
// when non-empty); response = the response column's string, an assistant turn; system = the
// system column ("" when absent/null).
// sharegpt: the messages list (a leading tags.system_tag message becomes the system, else the
// system column) alternates user|observation and assistant|function and has an even number of
// turns; the last turn is the response, the others the prompt.
// desirable = the kto_tag value, which must be a JSON bool: LLaMA-Factory's converter takes a
// record as a KTO example only when isinstance(kto_tag, bool), and its FeedbackDatasetProcessor
// drops the others.
//
// Bad records (DataError "[data] FILE line N: ..." with N the line where the record starts, or
// skipped and counted): invalid JSON; not an object; a kto_tag that is missing, null or not
// true/false ("key 'label' is not a bool (got string), expected true or false"); a response that
// is missing, null, not a string or empty (alpaca) or an empty last turn (sharegpt); a prompt
// column of the wrong type or missing (alpaca); a messages list that is missing, not a list of
// messages, out of role order, empty or of odd length ("sharegpt conversation has 3 turns,
// expected an even number ending with an assistant turn"); non-empty tools (not implemented). An
// empty file is an error too. max_samples counts records read, bad ones included.
// Throws ConfigError when attr has no kto_tag column or is a ranking dataset.
FeedbackSet read_feedback(const DatasetAttr& attr, const ReadOptions& opts);

}  // namespace unillm::data
