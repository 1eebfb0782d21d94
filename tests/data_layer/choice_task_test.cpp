// The CSV reader and LLaMA-Factory's eval task directories (data/csv.h, data/choice_task.h):
// quoting rules, both file layouts of tests/data/choice_tasks, the prompt wording, and bad input
// named by file and line. The evaluation itself is checked end to end against a Python
// re-implementation in tests/reference/choice_eval_check.py.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "data/choice_task.h"
#include "data/csv.h"
#include "data/error.h"
#include "support/expect.h"
#include "support/run_cli.h"

namespace unillm::data {
namespace {

namespace fs = std::filesystem;

TEST(Csv, QuotesCommasLineBreaksAndCrlf) {
  const auto rows = parse_csv("a,b,c\r\n\"x, y\",\"say \"\"hi\"\"\",\"two\nlines\"\n\n,,last\n", "t.csv");
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].fields, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(rows[1].fields, (std::vector<std::string>{"x, y", "say \"hi\"", "two\nlines"}));
  EXPECT_EQ(rows[1].line, 2);
  EXPECT_EQ(rows[2].fields, (std::vector<std::string>{"", "", "last"}));
  EXPECT_EQ(rows[2].line, 5);  // after the quoted line break and the empty line
  EXPECT_EQ(parse_csv("no newline at end", "t.csv").at(0).fields.at(0), "no newline at end");
  try {
    parse_csv("ok\n\"open,field\nnext", "bad.csv");
    FAIL() << "an unclosed quote was accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.csv line 2: a quoted field is not closed"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_csv("\"x\"y,z\n", "bad.csv"), DataError);
}

TEST(ChoiceTask, ReadsMmluAndCevalLayoutsInMappingOrder) {
  const std::string dir = testing::source_path("tests/data/choice_tasks");
  const auto mmlu = load_choice_task(dir, "mmlu_test");
  ASSERT_EQ(mmlu.size(), 3u);
  EXPECT_EQ(mmlu[0].key, "simple_arithmetic");
  EXPECT_EQ(mmlu[0].category, "STEM");
  EXPECT_EQ(mmlu[0].shots.size(), 5u);
  ASSERT_EQ(mmlu[0].questions.size(), 6u);
  EXPECT_EQ(mmlu[0].questions[5].choices[3], "\"one hundred\"");
  EXPECT_EQ(mmlu[0].questions[5].answer, "C");
  EXPECT_EQ(mmlu[1].questions[3].question, "Once upon a time, a little fox lived in the woods.\nWhere did the fox live?");
  const auto ceval = load_choice_task(dir, "ceval_validation");  // a header row: columns by name
  ASSERT_EQ(ceval.size(), 1u);
  EXPECT_EQ(ceval[0].shots.size(), 2u);
  ASSERT_EQ(ceval[0].questions.size(), 3u);
  EXPECT_EQ(ceval[0].questions[1].choices, (std::vector<std::string>{"purple", "blue", "yellow", "red"}));
  EXPECT_EQ(ceval[0].questions[1].answer, "C");
  EXPECT_EQ(load_choice_task(dir, "mmlu_train")[2].questions.size(), 5u);  // train = the dev files
}

TEST(ChoiceTask, MessagesFollowLlamaFactorysEvalTemplate) {
  const ChoiceQuestion shot{"1 + 1?", {"1", "2", "3", "4"}, "B"}, q{"2 + 2?", {"4", "5", "6", "7"}, "A"};
  const auto m = choice_messages(choice_format("en"), {shot}, q, "math");
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[0].content,
            "The following are multiple choice questions (with answers) about math.\n\n1 + 1?\nA. 1\nB. 2\nC. 3\nD. 4\nAnswer:");
  EXPECT_EQ(m[1].role, Role::kAssistant);
  EXPECT_EQ(m[1].content, "B");
  EXPECT_EQ(m[2].content, "2 + 2?\nA. 4\nB. 5\nC. 6\nD. 7\nAnswer:");
  EXPECT_EQ(m[3].content, "A");
  EXPECT_EQ(choice_messages(choice_format("zh"), {}, q, "数学")[0].content.rfind("以下是中国关于数学考试", 0), 0u);
  EXPECT_THROW(choice_format("fr"), ConfigError);
}

TEST(ChoiceTask, BadTasksAreNamed) {
  const std::string dir = testing::temp_dir("choice_task");
  auto expect_error = [&](const std::string& task, const std::string& want) {
    try {
      load_choice_task(dir, task);
      ADD_FAILURE() << task << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  expect_error("mmlu", "expected <dataset>_<split>");
  expect_error("mmlu_dev", "split 'dev' is not train, validation or test");
  expect_error("mmlu_test", "is not a directory");
  fs::create_directories(dir + "/mmlu");
  expect_error("mmlu_test", "mapping.json does not exist");
  std::ofstream(dir + "/mmlu/mapping.json") << R"({"algebra": {"name": "algebra", "category": "STEM"}})";
  std::ofstream(dir + "/mmlu/data.zip") << "PK";
  expect_error("mmlu_test", "extract data.zip there first (unzip)");
  fs::create_directories(dir + "/mmlu/data/dev");
  fs::create_directories(dir + "/mmlu/data/test");
  std::ofstream(dir + "/mmlu/data/dev/algebra_dev.csv") << "q,1,2,3,4,A\n";
  std::ofstream(dir + "/mmlu/data/test/algebra_test.csv") << "q,1,2,3,4,A\nshort row,1,2\n";
  expect_error("mmlu_test", "algebra_test.csv line 2: 3 fields, expected at least 6");
}

}  // namespace
}  // namespace unillm::data
