// What a training run may do to its output_dir. It never deletes what it did not write: the
// checks run before anything is written, partial writes go to staging dirs named so that no user
// dir can match (…​.unillm-XXXXXX), and the final output is staged and then moved in.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace unillm::train {

struct OutputDirRules {
  std::string output_dir;
  std::string config_path;  // named in messages
  bool overwrite = false;   // overwrite_output_dir: writing into a non-empty dir is allowed
  bool resuming = false;
  // Dirs the run reads (label, path), e.g. {"model_name_or_path", dir}: output_dir may be
  // neither one of them nor an ancestor of one.
  std::vector<std::pair<std::string, std::string>> inputs;
};

// Throws ConfigError naming the key when output_dir is a file, one of the inputs or an ancestor
// of one, or non-empty without overwrite_output_dir or a resume. Creates it, and removes the
// staging dirs an interrupted run of unillm left there (nothing else).
void prepare_output_dir(const OutputDirRules& rules);

// Throws ConfigError when dir (the value of key, e.g. export_dir) is one of inputs or an
// ancestor of one (its files would be written among theirs).
void refuse_input_dirs(const std::string& key, const std::string& dir,
                       const std::string& config_path,
                       const std::vector<std::pair<std::string, std::string>>& inputs);

// A new, empty staging dir output_dir/<stem>.unillm-XXXXXX for a write that must appear whole.
std::string make_staging_dir(const std::string& output_dir, const std::string& stem);
// Removes a staging dir (after a failed write); never throws.
void remove_staging_dir(const std::string& dir) noexcept;
// True for a name make_staging_dir makes.
bool is_staging_name(const std::string& name);

// Moves every file of staging into output_dir (one rename each, replacing a file of the same
// name) and removes staging. When staging holds model weights, weight files of another layout
// in output_dir (model.safetensors against model-0000N-of-0000M shards) go first, since HF would
// load the stale single file before the new shards.
void commit_staging(const std::string& staging, const std::string& output_dir);

}  // namespace unillm::train
