// Shared by the `unillm train` CLI tests: the JSON lines of a run's trainer_log.jsonl.
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

}  // namespace unillm::testing
