// Helpers for the data-layer tests: the bundled stories260K tokenizer, a scratch directory with a
// dataset_info.json, fixture paths.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "io/tokenizer.h"

namespace unillm::data::testing {

inline std::string fixture_dir() { return std::string(UNILLM_SOURCE_DIR) + "/tests/data/pt"; }

inline const io::Tokenizer& stories_tokenizer() {
  static std::unique_ptr<io::Tokenizer> tok =
      io::Tokenizer::load(std::string(UNILLM_SOURCE_DIR) + "/assets/stories260K");
  return *tok;
}

// A fresh directory under the system temp dir, removed on destruction.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& tag) {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("unillm_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() { std::filesystem::remove_all(path_); }
  std::string path() const { return path_.string(); }
  std::string write(const std::string& name, const std::string& bytes) const {
    std::string p = (path_ / name).string();
    std::filesystem::create_directories(std::filesystem::path(p).parent_path());
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }

 private:
  std::filesystem::path path_;
};

}  // namespace unillm::data::testing
