// Shared by the reference tests: where the fixtures live (made by make_fixtures.py) and readers
// for their JSON and raw little-endian f32 files.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace unillm::reference {

namespace fs = std::filesystem;

// $UNILLM_REFERENCE_DIR, else ${CMAKE_BINARY_DIR}/reference (ctest's reference_fixtures).
inline fs::path reference_dir() {
  const char* env = std::getenv("UNILLM_REFERENCE_DIR");
  if (env != nullptr && *env != '\0') return env;
  return UNILLM_REFERENCE_DEFAULT_DIR;
}

inline std::string how_to_make() {
  return "make it with: /usr/bin/python3 tests/reference/make_fixtures.py --out " +
         reference_dir().string() +
         " --stories assets/stories260K (or ctest -R reference_fixtures)";
}

inline nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("[parity] cannot open " + path.string());
  return nlohmann::json::parse(in);
}

// Raw little-endian f32 values; the file must hold exactly `count` of them.
inline std::vector<float> read_f32(const fs::path& path, int64_t count) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("[parity] cannot open " + path.string());
  std::vector<float> v(static_cast<size_t>(count));
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(count * sizeof(float)));
  if (in.gcount() != static_cast<std::streamsize>(count * sizeof(float)) || in.peek() != EOF) {
    throw std::runtime_error("[parity] " + path.string() + " does not hold " +
                             std::to_string(count) + " f32 values");
  }
  return v;
}

// The model dir named by a fixture's JSON: "." (the fixture dir itself) or an absolute path.
inline fs::path model_dir_of(const fs::path& fixture, const nlohmann::json& meta) {
  return fixture / meta.at("model_dir").get<std::string>();
}

}  // namespace unillm::reference
