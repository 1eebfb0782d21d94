// Shared by the tokenizer tests: scratch dirs and files for tokenizer variants built on the fly.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace unillm::testing {

inline void spit(const std::filesystem::path& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
}

// An empty dir under the temp dir, unique to this process.
inline std::filesystem::path fresh_dir(const std::string& name) {
  namespace fs = std::filesystem;
  fs::path p = fs::temp_directory_path() / ("unillm_tok_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

}  // namespace unillm::testing
