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

#include "models/causal_lm.h"

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

// [B, T] i32 from a JSON list of rows.
inline Tensor int_rows(const nlohmann::json& rows) {
  const auto v = rows.get<std::vector<std::vector<int32_t>>>();
  std::vector<int32_t> flat;
  for (const auto& r : v) flat.insert(flat.end(), r.begin(), r.end());
  return Tensor::from_ints(flat,
                           {static_cast<int64_t>(v.size()), static_cast<int64_t>(v.at(0).size())});
}

// A fixture batch {input_ids, labels, position_ids[, segment_ids]} as a TrainBatch.
inline models::TrainBatch batch_of(const nlohmann::json& b) {
  models::TrainBatch batch;
  batch.input_ids = int_rows(b.at("input_ids"));
  batch.labels = int_rows(b.at("labels"));
  batch.position_ids = int_rows(b.at("position_ids"));
  if (b.contains("segment_ids") && !b.at("segment_ids").is_null())
    batch.segment_ids = int_rows(b.at("segment_ids"));
  if (b.contains("row_lengths") && !b.at("row_lengths").is_null())
    batch.row_lengths = b.at("row_lengths").get<std::vector<int32_t>>();
  return batch;
}

}  // namespace unillm::reference
