// Trainer outputs in LLaMA-Factory's and HF's formats: trainer_log.jsonl lines, trainer_state.json,
// train_results.json and all_results.json.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace unillm::train {

// "H:MM:SS" as LLaMA-Factory's LogCallback writes elapsed/remaining times.
std::string format_duration(double seconds);

class TrainerLog {
 public:
  // Appends to output_dir/trainer_log.jsonl (kept across resume: lines after the resumed step
  // are dropped first, so the file matches the run exactly).
  TrainerLog(const std::string& output_dir, int64_t resume_step);
  void write(const nlohmann::json& line);

 private:
  std::string path_;
};

// Writes a JSON file atomically (pretty, as HF does).
void write_json(const std::string& path, const nlohmann::json& j);

}  // namespace unillm::train
