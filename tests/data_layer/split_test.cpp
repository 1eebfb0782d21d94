// The val_size split reproduces numpy's default_rng(seed).permutation and HF's split sizes; the
// golden file is made by tests/data/pt/make_split_golden.py with numpy itself.
#include "data/split.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "data/error.h"
#include "data_layer/data_test_util.h"
#include "io/json_file.h"

namespace unillm::data {
namespace {

TEST(Split, PermutationMatchesNumpyDefaultRng) {
  auto golden = io::read_json_file(testing::fixture_dir() + "/split_golden.json");
  for (const auto& c : golden["permutations"]) {
    const auto perm = numpy_permutation(c["seed"].get<uint64_t>(), c["n"].get<int64_t>());
    const auto head = c["head"].get<std::vector<int64_t>>();
    const auto tail = c["tail"].get<std::vector<int64_t>>();
    ASSERT_EQ(perm.size(), c["n"].get<size_t>());
    EXPECT_EQ(std::vector<int64_t>(perm.begin(), perm.begin() + head.size()), head) << c["seed"];
    EXPECT_EQ(std::vector<int64_t>(perm.end() - tail.size(), perm.end()), tail) << c["seed"];
  }
}

TEST(Split, SizesFollowHfTrainTestSplit) {
  auto golden = io::read_json_file(testing::fixture_dir() + "/split_golden.json");
  for (const auto& c : golden["sizes"]) {
    SplitSizes s = split_sizes(c["val_size"].get<double>(), c["n"].get<int64_t>());
    EXPECT_EQ(s.test, c["test"].get<int64_t>()) << c;
    EXPECT_EQ(s.train, c["train"].get<int64_t>()) << c;
  }
  EXPECT_EQ(split_sizes(0.07, 100).test, 8);  // 0.07 * 100 = 7.000000000000001 → ceil 8
  EXPECT_THROW(split_sizes(10, 10), DataError);
  EXPECT_THROW(split_sizes(0.99, 1), DataError);  // train would be empty
}

TEST(Split, TestIsThePermutationHeadTrainTheRest) {
  std::vector<int> rows = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, train, test;
  train_test_split(std::move(rows), 0.3, 42, train, test);  // perm: 5 6 0 7 3 2 4 9 1 8
  EXPECT_EQ(test, (std::vector<int>{5, 6, 0}));
  EXPECT_EQ(train, (std::vector<int>{7, 3, 2, 4, 9, 1, 8}));
}

}  // namespace
}  // namespace unillm::data
