// eval::score_sample / mean_scores / read_predictions / py_round4 / numpy_sum: LLaMA-Factory's
// per-sample rule on hand-worked cases; rounding and means against Python/numpy values.
#include "eval/similarity.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace unillm::eval {
namespace {

TEST(Similarity, PythonRound) {
  // Values from Python 3.11's round(x, 4): the exact binary value decides, ties go to even.
  EXPECT_EQ(py_round4(0.00005), 0.0001);
  EXPECT_EQ(py_round4(1.00005), 1.0001);
  EXPECT_EQ(py_round4(12.34565), 12.3456);
  EXPECT_EQ(py_round4(2.00015), 2.0002);
  EXPECT_EQ(py_round4(99.99999999), 100.0);
}

TEST(Similarity, NumpyPairwiseSum) {
  // numpy 1.24's np.sum([0.1] * n): n = 10 and 300 differ from a plain left-to-right loop.
  auto sum = [](size_t n) {
    std::vector<double> v(n, 0.1);
    return numpy_sum(v.data(), v.size());
  };
  EXPECT_EQ(sum(10), 1.0);
  EXPECT_EQ(sum(17), 1.7000000000000002);
  EXPECT_EQ(sum(100), 9.999999999999998);
  EXPECT_EQ(sum(300), 29.999999999999996);
}

TEST(Similarity, SampleRules) {
  // No jieba: BLEU only.
  SampleScores s = score_sample(nullptr, {"abcd", "abcd"});
  EXPECT_EQ(s.bleu4, 100.0);
  EXPECT_EQ(s.rouge1, 0.0);
  s = score_sample(nullptr, {"abce", "abcd"});
  EXPECT_EQ(s.bleu4, 59.4604);  // round(0.5946035575013605 * 100, 4)
  const std::vector<SampleScores> v = {{10, 20, 30, 40}, {20, 40, 60, 80}};
  const SampleScores m = mean_scores(v);
  EXPECT_EQ(m.bleu4, 15.0);
  EXPECT_EQ(m.rougel, 60.0);
  EXPECT_EQ(mean_scores({}).bleu4, 0.0);
}

TEST(Similarity, PredictionsFileErrorsNameTheLine) {
  const auto path = std::filesystem::temp_directory_path() / "unillm_preds.jsonl";
  auto expect_error = [&](const std::string& body, const std::string& what) {
    std::ofstream(path) << body;
    try {
      read_predictions(path.string());
      ADD_FAILURE() << "expected ConfigError for " << body;
    } catch (const ConfigError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(path.string() + " line 2"), std::string::npos) << msg;
      EXPECT_NE(msg.find(what), std::string::npos) << msg;
    }
  };
  const std::string ok = "{\"predict\": \"a\", \"label\": \"b\", \"prompt\": \"p\"}\n";
  expect_error(ok + "{\"predict\": \"a\"}\n", "'label' missing");
  expect_error(ok + "{\"predict\": 1, \"label\": \"b\"}\n", "'predict' is not a string");
  expect_error(ok + "{\"predict\": \n", "invalid JSON");
  expect_error(ok + "[1]\n", "expected a JSON object");
  std::ofstream(path) << ok << "\n" << ok;
  const auto rows = read_predictions(path.string());
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1].predict, "a");
  EXPECT_EQ(rows[1].label, "b");
  std::filesystem::remove(path);
  EXPECT_THROW(read_predictions(path.string()), IoError);
}

}  // namespace
}  // namespace unillm::eval
