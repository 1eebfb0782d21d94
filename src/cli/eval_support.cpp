// jieba's assets and Python-style floats (eval_support.h).
#include "cli/eval_support.h"

#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "core/error.h"

namespace unillm::cli {

std::string jieba_dir(const std::string& flag) {
  if (!flag.empty()) return flag;
  std::vector<std::string> tried;
  if (const char* a = std::getenv("UNILLM_ASSETS"); a && *a)
    tried.push_back(std::string(a) + "/jieba");
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    const std::filesystem::path bin = std::filesystem::path(std::string(exe, n)).parent_path();
    tried.push_back((bin / "../assets/jieba").lexically_normal().string());
    tried.push_back((bin / "../share/unillm/assets/jieba").lexically_normal().string());
  }
  tried.push_back(std::string(UNILLM_SOURCE_DIR) + "/assets/jieba");
  for (const auto& d : tried)
    if (std::filesystem::exists(d + "/dict.txt")) return d;
  std::string list;
  for (const auto& d : tried) list += " " + d;
  UNILLM_THROW(ConfigError, "[eval] jieba assets (dict.txt, hmm.tsv) not found in:", list,
               " (pass --jieba-dir or set UNILLM_ASSETS)");
}

std::string py_float(double x) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  std::string s(buf, r.ptr);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

}  // namespace unillm::cli
