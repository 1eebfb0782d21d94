// dataset_info.json: the name → file table of a LLaMA-Factory dataset_dir, read as LLaMA-Factory's
// parser.py reads it (file_name, formatting, ranking, columns, tags, hub urls): the pretraining
// text column and the SFT / preference columns and tags of the alpaca and sharegpt formats.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace unillm::data {

// LLaMA-Factory's SFT columns and sharegpt tags. Defaults are LLaMA-Factory's DatasetAttr
// defaults; as its set_attr, a `columns` (or `tags`) map given in dataset_info.json replaces every
// column (tag) it can name: a key it leaves out becomes "no such column" (nullopt), not the
// default.
struct SftColumns {
  // alpaca
  std::optional<std::string> prompt = "instruction";
  std::optional<std::string> query = "input";
  std::optional<std::string> response = "output";
  std::optional<std::string> history;  // [[user, assistant], ...] before the prompt
  // sharegpt
  std::optional<std::string> messages = "conversations";
  // both
  std::optional<std::string> system;
  std::optional<std::string> tools;  // read only to reject non-empty tools (not implemented)
  // both, ranking datasets (stages rm and dpo): the preferred and the dispreferred response
  // (alpaca: strings; sharegpt: one message object each). LLaMA-Factory's default is None: only a
  // `columns` map names them.
  std::optional<std::string> chosen;
  std::optional<std::string> rejected;
  // both, stage kto only: a bool column, true = desirable response (LLaMA-Factory's kto_tag;
  // default None, named only by a `columns` map).
  std::optional<std::string> kto_tag;
};

struct SharegptTags {
  std::optional<std::string> role_tag = "from";
  std::optional<std::string> content_tag = "value";
  std::optional<std::string> user_tag = "human";
  std::optional<std::string> assistant_tag = "gpt";
  std::optional<std::string> observation_tag = "observation";
  std::optional<std::string> function_tag = "function_call";
  std::optional<std::string> system_tag = "system";
};

struct DatasetAttr {
  std::string name;                   // the key in dataset_info.json
  std::vector<std::string> files;     // resolved local files (a directory lists its files, sorted)
  std::string file_type;              // "txt" | "json" (json covers .json and .jsonl)
  std::string formatting = "alpaca";  // "alpaca" | "sharegpt" | "openai" (sharegpt's columns and tags)
  bool ranking = false;               // pairwise data (chosen/rejected): stages rm and dpo only
  // Stage pt: the text of a record.
  std::string prompt_column = "text";  // LLaMA-Factory `columns.prompt` (unillm default "text")
  std::optional<std::string> query_column;  // `columns.query`: appended after "\n" when non-empty
  // Stages sft, rm, dpo, kto.
  SftColumns columns;
  SharegptTags tags;
  // LLaMA-Factory's num_samples: this many rows drawn at random (data/num_samples.h).
  std::optional<int64_t> num_samples;
};

// Reads DATASET_DIR/dataset_info.json and resolves each name for a training stage ("pt", "sft",
// "rm", "dpo" or "kto"). Throws ConfigError naming the file and the dataset for: a missing/invalid
// dataset_info.json, an undefined name, a hub/script entry with no local file ("not available
// offline"), a missing file, an unsupported file type or formatting, a column or tag that is not
// a string, `ranking: true` for stages pt, sft and kto ("not applicable"), and its absence for rm
// and dpo ("dataset X is not a ranking dataset; stage dpo needs ranking: true"), columns.kto_tag
// for any stage but kto ("kto_tag is only used by stage kto") and its absence for kto (LLaMA-
// Factory would drop every example), a num_samples that is not a positive integer;
// NotImplemented for multimodal columns (images, videos, audios), sharegpt or openai for stage pt,
// and any other stage (ppo).
// Stage pt reads `columns.prompt` (default "text") and `columns.query`; stage sft reads the
// SftColumns / SharegptTags above and accepts only .json/.jsonl files. Stages rm and dpo (LLaMA-
// Factory's dpo workflow loads its data as stage rm) read the same plus columns.chosen and
// columns.rejected, which must both be named; alpaca needs no response column there. Stage kto
// reads what sft reads plus columns.kto_tag.
std::vector<DatasetAttr> resolve_datasets(const std::vector<std::string>& names,
                                          const std::string& dataset_dir, const std::string& stage);
// Stage pt.
std::vector<DatasetAttr> resolve_datasets(const std::vector<std::string>& names,
                                          const std::string& dataset_dir);

}  // namespace unillm::data
