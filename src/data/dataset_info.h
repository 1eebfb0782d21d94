// dataset_info.json: the name → file table of a LLaMA-Factory dataset_dir, read as LLaMA-Factory's
// parser.py reads it (file_name, formatting, ranking, columns, hub urls), reduced to what the
// pretraining reader needs.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace unillm::data {

struct DatasetAttr {
  std::string name;                    // the key in dataset_info.json
  std::vector<std::string> files;      // resolved local files (a directory lists its files, sorted)
  std::string file_type;               // "txt" | "json" (json covers .json and .jsonl)
  std::string prompt_column = "text";  // LLaMA-Factory `columns.prompt`
  std::optional<std::string> query_column;  // `columns.query`: appended after "\n" when non-empty
};

// Reads DATASET_DIR/dataset_info.json and resolves each name. Throws ConfigError naming the file
// and the dataset for: a missing/invalid dataset_info.json, an undefined name, a hub/script entry
// with no local file ("not available offline"), a missing file, an unsupported file type or
// formatting, `ranking: true`, `num_samples` (not implemented yet).
std::vector<DatasetAttr> resolve_datasets(const std::vector<std::string>& names,
                                          const std::string& dataset_dir);

}  // namespace unillm::data
