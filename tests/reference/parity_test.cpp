// Model parity against the independent PyTorch reference (tests/reference/make_fixtures.py):
// logits of each tiny random family model and of stories260K, and stories260K perplexity.
// Fixtures live in $UNILLM_REFERENCE_DIR, else ${CMAKE_BINARY_DIR}/reference (ctest's
// reference_fixtures test writes them); a missing fixture skips with the command to make it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "infer/perplexity.h"
#include "models/causal_lm.h"
#include "support/expect.h"

namespace unillm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path reference_dir() {
  const char* env = std::getenv("UNILLM_REFERENCE_DIR");
  if (env != nullptr && *env != '\0') return env;
  return UNILLM_REFERENCE_DEFAULT_DIR;
}

std::string how_to_make() {
  return "make it with: /usr/bin/python3 tests/reference/make_fixtures.py --out " +
         reference_dir().string() +
         " --stories assets/stories260K (or ctest -R reference_fixtures)";
}

json read_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("[parity] cannot open " + path.string());
  return json::parse(in);
}

// Raw little-endian f32 values; the file must hold exactly `count` of them.
std::vector<float> read_f32(const fs::path& path, int64_t count) {
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

// The model dir named by meta.json: "." (the fixture dir itself) or an absolute path.
fs::path model_dir_of(const fs::path& fixture, const json& meta) {
  return fixture / meta.at("model_dir").get<std::string>();
}

class LogitsParity : public ::testing::TestWithParam<std::string> {};

TEST_P(LogitsParity, MatchesReference) {
  testing::init_cpu();
  const fs::path dir = reference_dir() / GetParam();
  if (!fs::exists(dir / "meta.json")) {
    GTEST_SKIP() << "fixture " << dir << " missing; " << how_to_make();
  }
  const json meta = read_json(dir / "meta.json");
  const auto ids = meta.at("prompt_ids").get<std::vector<int32_t>>();
  const int64_t T = meta.at("shape").at(0).get<int64_t>();
  const int64_t V = meta.at("shape").at(1).get<int64_t>();
  const double atol = meta.value("atol", 1e-4);
  const std::vector<float> want = read_f32(dir / meta.at("logits_file").get<std::string>(), T * V);

  auto model = models::load_causal_lm(model_dir_of(dir, meta).string());
  Tensor logits = model->logits_all(ids);  // [T, V]
  ASSERT_EQ(logits.dtype(), DType::f32);
  ASSERT_EQ(shape_str(logits.shape()), shape_str(Shape{T, V}));
  const std::vector<float> got = logits.to(Device{}).to_float_vector();
  ASSERT_EQ(static_cast<int64_t>(got.size()), T * V);

  double max_diff = 0;
  int64_t worst = 0;
  for (int64_t i = 0; i < T * V; ++i) {
    double d = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(d <= max_diff)) {  // also catches NaN
      max_diff = std::isnan(d) ? INFINITY : d;
      worst = i;
    }
  }
  std::cout << "[parity] " << GetParam() << " (" << meta.value("model_type", "?") << ", weights "
            << meta.value("weights_dtype", "?") << "): max |logits - reference| = " << max_diff
            << " over [" << T << ", " << V << "]\n";
  RecordProperty("max_abs_diff", std::to_string(max_diff));
  EXPECT_LE(max_diff, atol) << "worst at token " << worst / V << ", vocab id " << worst % V << ": "
                            << got[worst] << " vs reference " << want[worst];
}

INSTANTIATE_TEST_SUITE_P(Reference, LogitsParity,
                         ::testing::Values("llama_gqa", "llama_gqa_bf16", "llama_linear", "qwen2",
                                           "qwen3", "mistral", "stories260K"),
                         [](const auto& info) { return info.param; });

struct PplCase {
  int64_t max_length;
  int64_t stride;
};

class StoriesPerplexity : public ::testing::TestWithParam<PplCase> {};

TEST_P(StoriesPerplexity, MatchesReference) {
  testing::init_cpu();
  const fs::path dir = reference_dir() / "stories260K";
  if (!fs::exists(dir / "perplexity.json")) {
    GTEST_SKIP() << "fixture " << dir / "perplexity.json"
                 << " missing (stories260K absent when "
                 << "fixtures were made?); " << how_to_make();
  }
  const PplCase c = GetParam();
  const json data = read_json(dir / "perplexity.json");
  const json* run = nullptr;
  for (const json& r : data.at("runs")) {
    if (r.at("max_length") == c.max_length && r.at("stride") == c.stride) run = &r;
  }
  if (run == nullptr)
    GTEST_SKIP() << "no run for max_length " << c.max_length << ", stride " << c.stride;
  const auto ids = data.at("ids").get<std::vector<int32_t>>();
  const double want_nll = run->at("nll").get<double>();
  const int64_t want_tokens = run->at("tokens").get<int64_t>();

  auto model = models::load_causal_lm(model_dir_of(dir, read_json(dir / "meta.json")).string());
  infer::PerplexityResult got = infer::perplexity(*model, ids, c.max_length, c.stride);
  const double rel = std::fabs(got.nll - want_nll) / std::fabs(want_nll);
  std::cout << "[parity] stories260K ppl(max_length " << c.max_length << ", stride " << c.stride
            << "): nll " << got.nll << " vs " << want_nll << " (rel " << rel << "), tokens "
            << got.tokens << " vs " << want_tokens << ", ppl " << got.ppl << "\n";
  EXPECT_EQ(got.tokens, want_tokens);
  EXPECT_LE(rel, 1e-5);
  EXPECT_NEAR(got.ppl, std::exp(want_nll), 1e-5 * std::exp(want_nll) * (1 + want_nll));
}

INSTANTIATE_TEST_SUITE_P(Reference, StoriesPerplexity,
                         ::testing::Values(PplCase{64, 32}, PplCase{64, 64}), [](const auto& info) {
                           return "ml" + std::to_string(info.param.max_length) + "_stride" +
                                  std::to_string(info.param.stride);
                         });

}  // namespace
}  // namespace unillm
