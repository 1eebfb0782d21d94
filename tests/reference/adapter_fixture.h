// Shared by the LoRA and DPO parity tests: a fixture's adapter tensors (PEFT keys) and their
// comparison with the model's adapter parameters or gradients.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "models/adapter.h"
#include "nn/module.h"
#include "reference/reference_io.h"

namespace unillm::reference {

using nlohmann::json;

// {PEFT key: f32 values} from a fixture file and its index.
inline std::map<std::string, std::vector<float>> read_tensors(const fs::path& file, const json& index) {
  int64_t total = 0;
  for (const json& t : index) {
    int64_t n = 1;
    for (const json& d : t.at("shape")) n *= d.get<int64_t>();
    total = std::max(total, t.at("offset").get<int64_t>() + n);
  }
  const std::vector<float> data = read_f32(file, total);
  std::map<std::string, std::vector<float>> out;
  for (const json& t : index) {
    int64_t n = 1;
    for (const json& d : t.at("shape")) n *= d.get<int64_t>();
    const auto off = static_cast<size_t>(t.at("offset").get<int64_t>());
    out[t.at("name").get<std::string>()] = {data.begin() + off, data.begin() + off + n};
  }
  return out;
}

// Per-tensor ‖got − ref‖ / ‖ref − base‖ over the adapter's tensors (grads or values); the worst.
inline double worst_rel(const nn::NamedTensors& got, const std::map<std::string, std::vector<float>>& want,
                 const std::map<std::string, std::vector<float>>& base, double tol,
                 std::string& worst_name) {
  double worst = 0;
  EXPECT_EQ(got.size(), want.size());
  for (const auto& [name, t] : got) {
    const std::string key = models::peft_key(name, "default");
    auto it = want.find(key);
    if (it == want.end()) {
      ADD_FAILURE() << key << " not in the fixture";
      continue;
    }
    const std::vector<float> g = t.contiguous().to_float_vector();
    EXPECT_EQ(g.size(), it->second.size()) << key;
    double num = 0, den = 0;
    for (size_t i = 0; i < g.size() && i < it->second.size(); ++i) {
      const double r = it->second[i], b = base.empty() ? 0.0 : base.at(key)[i];
      num += (g[i] - r) * (g[i] - r);
      den += (r - b) * (r - b);
    }
    const double rel = std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
    EXPECT_LE(rel, tol) << key;
    if (!(rel <= worst)) worst = std::isnan(rel) ? INFINITY : rel, worst_name = key;
  }
  return worst;
}

}  // namespace unillm::reference
