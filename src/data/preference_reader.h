// Pairwise preference records (stages rm and dpo): LLaMA-Factory ranking datasets in the alpaca
// and sharegpt formats (its converter.py with `ranking: true`), each record → one prompt with a
// chosen and a rejected response. Where LLaMA-Factory drops a broken example, this reader reports
// it as an error naming file and line, or skips and counts it with ReadOptions::skip_bad_records.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset_info.h"
#include "data/record_reader.h"  // ReadOptions
#include "data/template.h"       // Message

namespace unillm::data {

struct PreferenceExample {
  // Alternating user|observation and assistant|function turns, starting and ending with a user
  // (or observation) turn: LLaMA-Factory's _prompt.
  std::vector<Message> prompt;
  Message chosen, rejected;  // assistant (or function) turns: LLaMA-Factory's _response[0], [1]
  std::string system;        // "" = the template's default system prompt
  std::string source;        // "FILE line N" for messages about this record
};

struct PreferenceSet {
  std::vector<PreferenceExample> examples;
  int64_t rows = 0;                        // records seen (what max_samples counts)
  int64_t skipped_records = 0;             // bad records skipped (skip_bad_records only)
  std::vector<std::string> skip_messages;  // the first few skip reasons
};

// Reads every file of a dataset resolved for stage rm or dpo (attr.ranking; .json array or JSON
// lines), through the same record loop as read_conversations.
//
// alpaca: prompt = history pairs (user, assistant)… + user(prompt ["\n" + query], each part only
// when non-empty); chosen / rejected = the strings of the chosen / rejected columns, as assistant
// turns; system = the system column ("" when absent/null).
// sharegpt: the messages list (a leading tags.system_tag message becomes the system, else the
// system column) alternates user|observation (1st, 3rd, …) and assistant|function (2nd, 4th, …)
// and has an odd number of turns, ending with a user turn; chosen / rejected are message objects
// {role_tag: assistant or function tag, content_tag: string}.
//
// Bad records (DataError "[data] FILE line N: ..." with N the line where the record starts, or
// skipped and counted): invalid JSON; not an object; a chosen or rejected value that is missing,
// null, of the wrong type (alpaca: not a string; sharegpt: not an object with string role and
// content) or empty; a sharegpt chosen/rejected whose role is not the assistant or function tag;
// chosen and rejected identical (same role and content: nothing to prefer); a prompt column of
// the wrong type or missing (alpaca), a messages list that is missing, not a list of messages,
// out of role order, empty or of even length ("sharegpt prompt has 2 turns, expected an odd number
// ending with a user turn"); non-empty tools (not implemented). An empty file is an error too.
// max_samples counts records read, bad ones included (as read_conversations).
// Throws ConfigError when attr is not a ranking dataset or lacks the chosen/rejected columns.
PreferenceSet read_preferences(const DatasetAttr& attr, const ReadOptions& opts);

}  // namespace unillm::data
