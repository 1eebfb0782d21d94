// SFT record readers: LLaMA-Factory alpaca and sharegpt datasets (its converter.py semantics) and
// PaddleNLP {"src", "tgt"} JSON lines (llm/run_finetune.py), each record → one Conversation.
// Where LLaMA-Factory drops a broken example with a warning, these readers report it as an error
// naming file and line, or skip and count it with ReadOptions::skip_bad_records.
#pragma once

#include <string>

#include "data/conversation.h"
#include "data/dataset_info.h"
#include "data/record_reader.h"  // ReadOptions

namespace unillm::data {

// Reads every file of a dataset resolved for stage sft (.json array or JSON lines).
//
// alpaca: messages = history pairs (user, assistant)… + user(prompt ["\n" + query], each part
// only when non-empty) + assistant(response); system = the system column ("" when absent/null).
// sharegpt: a first message whose role is tags.system_tag becomes the system (else the system
// column); the rest must alternate user|observation (1st, 3rd, …) and assistant|function (2nd,
// 4th, …) and end on an assistant|function turn, which is the response.
//
// Bad records (DataError "[data] FILE line N: ..." with N the line where the record starts, or
// skipped and counted): invalid JSON; not an object; a missing prompt/response/messages column;
// a value of the wrong type (non-string text, history not a list of [user, assistant] string
// pairs, messages not a list of objects with string role and content); a role out of order
// ("sharegpt turn 3 has role 'human', expected an assistant turn"; turns count from 1 over the
// record's list, including a leading system message); an odd number of turns or none; a null,
// missing or empty response; a tools value that is not a JSON list of tool schemas (a string, as
// LLaMA-Factory's glaive_toolcall data, or the list itself). An empty file is an error too.
// Conversation::tools holds the tools JSON ("" when the column is absent, null or empty); function
// calls are the sharegpt function_call turns, rendered by the template's function format.
// max_samples counts records read, bad ones included (LLaMA-Factory selects rows before it drops
// broken ones).
ConversationSet read_conversations(const DatasetAttr& attr, const ReadOptions& opts);

// PaddleNLP fine-tuning data: JSON lines of {"src": str | [str], "tgt": str | [str]}; lists are
// rounds (src[i] → user, tgt[i] → assistant) and must have equal, non-zero lengths; every tgt
// must be non-empty. Conversation::system stays "" (PaddleNLP takes the system prompt from the
// chat template); other keys are ignored.
ConversationSet read_src_tgt_file(const std::string& file, const ReadOptions& opts);

struct SrcTgtData {
  ConversationSet train;
  ConversationSet dev;  // empty when there is no dev.json
  bool has_dev = false;
};

// dir_or_file: a directory with train.json (required) and dev.json (optional), PaddleNLP's
// dataset_name_or_path layout; or one file, read as the training data. Throws ConfigError when
// neither exists, DataError for bad records (see read_src_tgt_file). max_samples applies to each
// file separately.
SrcTgtData read_src_tgt(const std::string& dir_or_file, const ReadOptions& opts);

}  // namespace unillm::data
