// Model parity against the independent PyTorch reference (tests/reference/make_fixtures.py):
// logits of each tiny random family model and of stories260K, and stories260K perplexity.
// Fixtures live in $UNILLM_REFERENCE_DIR, else ${CMAKE_BINARY_DIR}/reference (ctest's
// reference_fixtures test writes them); a missing fixture skips with the command to make it.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include "infer/perplexity.h"
#include "models/causal_lm.h"
#include "reference/reference_io.h"
#include "support/expect.h"

namespace unillm {
namespace {

using nlohmann::json;
using reference::how_to_make;
using reference::model_dir_of;
using reference::read_f32;
using reference::read_json;
using reference::reference_dir;
namespace fs = std::filesystem;

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
                                           "qwen3", "mistral", "qwen2_yarn", "llama_dynamic",
                                           "qwen3_moe", "qwen2_moe", "stories260K"),
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
