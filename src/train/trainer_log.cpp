// jsonl log and results files.
#include "train/trainer_log.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "io/json_file.h"

namespace unillm::train {

std::string format_duration(double seconds) {
  auto s = static_cast<long long>(std::max(0.0, std::round(seconds)));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", s / 3600, (s / 60) % 60, s % 60);
  return buf;
}

TrainerLog::TrainerLog(const std::string& output_dir, int64_t resume_step)
    : path_((std::filesystem::path(output_dir) / "trainer_log.jsonl").string()) {
  std::string kept;
  if (resume_step > 0 && std::filesystem::exists(path_)) {
    std::ifstream in(path_);
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object()) continue;  // a line cut by a kill is dropped
      const char* key = j.contains("current_steps") ? "current_steps" : "eval_step";
      const bool has = j.contains(key) && j[key].is_number_integer();
      if (j.contains(key) && !has) continue;
      if ((has ? j[key].get<int64_t>() : 0) <= resume_step) kept += line + "\n";
    }
  }
  io::write_file_atomic(path_, kept);
}

void TrainerLog::write(const nlohmann::json& line) { io::append_file(path_, line.dump() + "\n"); }

void write_json(const std::string& path, const nlohmann::json& j) { io::write_file_atomic(path, j.dump(2) + "\n"); }

}  // namespace unillm::train
