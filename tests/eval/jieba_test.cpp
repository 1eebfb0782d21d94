// eval::Jieba against jieba 0.42.1's own output on a few sentences (copied from running
// jieba.cut; metrics_check.py compares hundreds more), the HMM, and bad dictionary lines.
#include "eval/jieba.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "eval/text.h"

namespace unillm::eval {
namespace {

class JiebaTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    jieba_ = new Jieba(Jieba::load(UNILLM_SOURCE_DIR "/assets/jieba"));
  }
  static void TearDownTestSuite() { delete jieba_; }
  static std::vector<std::string> cut(const std::string& s) { return jieba_->cut_utf8(s); }
  static Jieba* jieba_;
};
Jieba* JiebaTest::jieba_ = nullptr;

using V = std::vector<std::string>;

TEST_F(JiebaTest, DictionaryRoute) {
  EXPECT_EQ(cut("我来到北京清华大学"), (V{"我", "来到", "北京", "清华大学"}));
  EXPECT_EQ(cut("小明硕士毕业于中国科学院计算所，后在日本京都大学深造"),
            (V{"小明", "硕士", "毕业", "于", "中国科学院", "计算所", "，", "后", "在",
               "日本京都大学", "深造"}));
}

TEST_F(JiebaTest, HmmFindsUnknownWords) {
  // "杭研" is not in the dictionary: the HMM joins it (B E).
  EXPECT_EQ(cut("他来到了网易杭研大厦"), (V{"他", "来到", "了", "网易", "杭研", "大厦"}));
  EXPECT_EQ(jieba_->freq(U"杭研"), 0);
}

TEST_F(JiebaTest, NonChineseRuns) {
  EXPECT_EQ(cut("AT&T iPhone15 3.5% hello-world  \r\n测试"),
            (V{"AT&T", " ", "iPhone15", " ", "3.5%", " ", "hello", "-", "world", " ", " ", "\r\n",
               "测试"}));
  EXPECT_EQ(cut(""), V{});
  EXPECT_EQ(cut("，。"), (V{"，", "。"}));
}

TEST(JiebaLoad, BadDictionaryLineNamesIt) {
  const auto dir = std::filesystem::temp_directory_path() / "unillm_jieba_bad";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "dict.txt") << "你好 3 n\n坏行\n";
  std::filesystem::copy_file(UNILLM_SOURCE_DIR "/assets/jieba/hmm.tsv", dir / "hmm.tsv",
                             std::filesystem::copy_options::overwrite_existing);
  try {
    Jieba::load(dir.string());
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("dict.txt line 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Jieba::load((dir / "absent").string()), IoError);
  std::filesystem::remove_all(dir);
}

TEST(JiebaHmm, BadTableLineNamesIt) {
  const auto path = std::filesystem::temp_directory_path() / "unillm_hmm_bad.tsv";
  std::ofstream(path) << "start\tB\t-0.26\nstart\tX\t-1\n";
  try {
    JiebaHmm::load(path.string());
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
}

TEST(Text, Utf8AndPythonWhitespace) {
  EXPECT_EQ(utf8_to_u32("a\xE4\xBD\xA0\xF0\x9F\x98\x80"), (std::u32string{U'a', U'你', U'😀'}));
  EXPECT_EQ(utf8_to_u32("\xC0\xAF"), (std::u32string{0xFFFD, 0xFFFD}));  // overlong '/'
  EXPECT_EQ(u32_to_utf8(U"a你😀"), "a\xE4\xBD\xA0\xF0\x9F\x98\x80");
  EXPECT_TRUE(is_py_space(U'\u3000'));
  EXPECT_TRUE(is_py_space(U'\x1c'));
  EXPECT_FALSE(is_py_space(U'\u200b'));  // zero-width space is not whitespace to Python
  EXPECT_EQ(py_split_ws(U" a\u3000b\n"), (std::vector<std::u32string>{U"a", U"b"}));
}

}  // namespace
}  // namespace unillm::eval
