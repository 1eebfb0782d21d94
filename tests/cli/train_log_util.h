// Shared by the `unillm train` CLI tests: the JSON lines of a run's trainer_log.jsonl, and the
// training losses among them.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace unillm::testing {

inline std::vector<nlohmann::json> log_lines(const std::string& out) {
  std::vector<nlohmann::json> lines;
  std::ifstream f(out + "/trainer_log.jsonl");
  std::string l;
  while (std::getline(f, l))
    if (!l.empty()) lines.push_back(nlohmann::json::parse(l));
  return lines;
}

// The "loss" of every training line (evaluation lines carry eval_loss instead).
inline std::vector<double> train_losses(const std::string& out) {
  std::vector<double> l;
  for (auto& line : log_lines(out))
    if (line.contains("loss")) l.push_back(line["loss"].get<double>());
  return l;
}

// The value of `key` on every line that has it, in order (e.g. eval_accuracy).
inline std::vector<double> logged_values(const std::string& out, const std::string& key) {
  std::vector<double> v;
  for (auto& line : log_lines(out))
    if (line.contains(key)) v.push_back(line[key].get<double>());
  return v;
}

// The training lines (those with a "loss") of a run's trainer_log.jsonl, whole.
inline std::vector<nlohmann::json> train_lines(const std::string& out) {
  std::vector<nlohmann::json> l;
  for (auto& line : log_lines(out))
    if (line.contains("loss")) l.push_back(line);
  return l;
}

}  // namespace unillm::testing
