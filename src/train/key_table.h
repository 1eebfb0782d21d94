// The committed table of every configuration key unillm knows: each key of LLaMA-Factory's
// argument dataclasses (ModelArguments, DataArguments, FinetuningArguments, GeneratingArguments,
// its TrainingArguments/RayArguments) and of HF (Seq2Seq)TrainingArguments (v4 and v5 names),
// plus unillm's own. docs/config-keys.md is generated from it (tests keep the two in sync).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace unillm::train {

enum class KeyStatus {
  kImplemented,     // a TrainArgs field
  kIgnored,         // accepted; a one-time warning when set to something other than off/null
  kNotImplemented,  // rejected when set to something other than off/null
};

struct KeyInfo {
  std::string_view name;
  KeyStatus status;
  std::string_view source;  // model | data | finetuning | generating | training | unillm
};

// All keys, sorted by name, unique.
const std::vector<KeyInfo>& key_table();
const KeyInfo* find_key(std::string_view name);  // nullptr when unknown
// The known key nearest to name by edit distance ("" when nothing is within reach).
std::string nearest_key(std::string_view name);
// Levenshtein distance (insert, delete, substitute; cost 1 each).
size_t edit_distance(std::string_view a, std::string_view b);
std::string_view status_name(KeyStatus s);
// Why a not-implemented key is refused, for the error ("" when the key has no note).
std::string_view not_implemented_reason(std::string_view name);
// docs/config-keys.md as it should read.
std::string key_table_markdown();

}  // namespace unillm::train
