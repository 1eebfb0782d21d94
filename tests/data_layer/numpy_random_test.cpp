// numpy's default_rng and HF datasets' random interleaving (data/numpy_random.h, data/mix.h)
// against goldens that numpy 1.24.2 and datasets 2.14.4 wrote (tools/make_interleave_goldens.py):
// the raw PCG64 stream and random() of several seeds (32- and 64-bit ones included), and
// interleave_datasets with probabilities under both stopping strategies. Then what is refused.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/mix.h"
#include "data/numpy_random.h"
#include "support/expect.h"
#include "support/run_cli.h"

namespace unillm::data {
namespace {

nlohmann::json goldens() {
  return nlohmann::json::parse(testing::slurp(testing::source_path("tests/data/interleave/goldens.json")));
}

TEST(NumpyRandom, DefaultRngStreamsMatchNumpy) {
  const auto g = goldens();
  ASSERT_EQ(g["generators"].size(), 8u);
  for (const auto& c : g["generators"]) {
    const auto seed = c["seed"].get<uint64_t>();
    SCOPED_TRACE(seed);
    NumpyGenerator raw(seed);
    for (const auto& v : c["raw"]) EXPECT_EQ(raw.next_uint64(), std::stoull(v.get<std::string>()));
    NumpyGenerator r(seed);
    for (const auto& v : c["random"]) EXPECT_EQ(r.random(), v.get<double>());
  }
}

TEST(NumpyRandom, InterleaveWithProbabilitiesMatchesHfDatasets) {
  const auto g = goldens();
  ASSERT_EQ(g["cases"].size(), 8u);
  for (const auto& c : g["cases"]) {
    const auto lengths = c["lengths"].get<std::vector<int64_t>>();
    const auto probs = c["probs"].get<std::vector<double>>();
    const bool over = c["strategy"] == "all_exhausted";
    SCOPED_TRACE(c.dump());
    EXPECT_EQ(random_interleave(lengths, probs, c["seed"].get<uint64_t>(), over),
              c["indices"].get<std::vector<int64_t>>());
    // Through mix_datasets, as the pt and sft readers call it.
    std::vector<std::vector<int64_t>> parts;
    int64_t next = 0;
    for (int64_t n : lengths) {
      parts.emplace_back();
      for (int64_t i = 0; i < n; ++i) parts.back().push_back(next++);
    }
    EXPECT_EQ(mix_datasets(std::move(parts), over ? "interleave_over" : "interleave_under", probs,
                           c["seed"].get<uint64_t>()),
              c["indices"].get<std::vector<int64_t>>());
  }
}

TEST(NumpyRandom, BadProbabilitiesAreRefused) {
  using testing::expect_throw_with;
  expect_throw_with<ConfigError>([] { random_interleave({3, 3}, {0.5, 0.6}, 1, false); },
                                 "interleave_probs must sum to 1");
  expect_throw_with<ConfigError>([] { random_interleave({3, 3}, {1.5, -0.5}, 1, false); }, "negative probability");
  // HF would loop forever: a dataset that is never picked is never used up.
  expect_throw_with<ConfigError>([] { random_interleave({3, 3}, {1.0, 0.0}, 1, true); },
                                 "dataset 2 of 2 has probability 0");
  expect_throw_with<ConfigError>(
      [] { mix_datasets(std::vector<std::vector<int>>{{1}, {2}}, "interleave_under", {1.0}, 1); },
      "interleave_probs has 1 entries for 2 datasets");
}

}  // namespace
}  // namespace unillm::data
