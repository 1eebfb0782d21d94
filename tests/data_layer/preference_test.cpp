// Preference (ranking) data: dataset_info.json for stages rm/dpo, the alpaca and sharegpt pairwise
// readers (LLaMA-Factory's converters with ranking), bad records with file:line, skipping and
// counting, and the bundled data/dpo_en_demo.json.
#include <gtest/gtest.h>

#include "core/error.h"
#include "data/error.h"
#include "data/preference_reader.h"
#include "data_layer/data_test_util.h"
#include "io/json_file.h"

namespace unillm::data {
namespace {

using testing::ScratchDir;

std::string pref_dir() { return std::string(UNILLM_SOURCE_DIR) + "/tests/data/pref"; }

DatasetAttr attr_of(const std::string& name, const std::string& dir = pref_dir(),
                    const std::string& stage = "dpo") {
  return resolve_datasets({name}, dir, stage).at(0);
}

// "user:…|assistant:…" for compact expectations.
std::string flat(const std::vector<Message>& ms) {
  static const char* kNames[] = {"user", "assistant", "system", "function", "observation"};
  std::string s;
  for (const auto& m : ms) {
    if (!s.empty()) s += "|";
    s += std::string(kNames[static_cast<int>(m.role)]) + ":" + m.content;
  }
  return s;
}

std::string resolve_error(const std::string& name, const std::string& dir,
                          const std::string& stage) {
  try {
    resolve_datasets({name}, dir, stage);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(DatasetInfoPref, RankingColumnsForBothFormattings) {
  for (const std::string stage : {"dpo", "rm"}) {
    DatasetAttr a = attr_of("alpaca_pairs", pref_dir(), stage);
    EXPECT_TRUE(a.ranking);
    EXPECT_EQ(a.formatting, "alpaca");
    EXPECT_EQ(a.columns.prompt, "instruction");
    EXPECT_EQ(a.columns.chosen, "chosen");
    EXPECT_EQ(a.columns.rejected, "rejected");
    EXPECT_EQ(a.columns.history, "history");
    EXPECT_FALSE(a.columns.response);  // a columns map without it: no response column
  }
  DatasetAttr s = attr_of("sharegpt_pairs");
  EXPECT_TRUE(s.ranking);
  EXPECT_EQ(s.formatting, "sharegpt");
  EXPECT_EQ(s.columns.messages, "conversations");
  EXPECT_EQ(s.columns.chosen, "chosen");
  EXPECT_EQ(s.columns.rejected, "rejected");
  EXPECT_EQ(s.tags.assistant_tag, "gpt");  // no tags map: LLaMA-Factory's defaults
  // As registered by LLaMA-Factory in the bundled data/.
  DatasetAttr d = attr_of("dpo_en_demo", std::string(UNILLM_SOURCE_DIR) + "/data");
  EXPECT_TRUE(d.ranking);
  EXPECT_EQ(d.formatting, "sharegpt");
  EXPECT_EQ(d.columns.chosen, "chosen");
  // A non-ranking entry has no chosen/rejected columns (LLaMA-Factory's default is None).
  EXPECT_FALSE(attr_of("not_ranking", pref_dir(), "sft").columns.chosen);
}

TEST(DatasetInfoPref, StagesRmAndDpoNeedRankingAndTheOthersRefuseIt) {
  const std::string info = pref_dir() + "/dataset_info.json";
  EXPECT_EQ(resolve_error("not_ranking", pref_dir(), "dpo"),
            "[data] " + info +
                ": dataset 'not_ranking' is not a ranking dataset; stage dpo needs ranking: true");
  EXPECT_EQ(resolve_error("not_ranking", pref_dir(), "rm"),
            "[data] " + info +
                ": dataset 'not_ranking' is not a ranking dataset; stage rm needs ranking: true");
  EXPECT_THROW(resolve_datasets({"not_ranking"}, pref_dir(), "dpo"), ConfigError);
  EXPECT_NE(resolve_error("alpaca_pairs", pref_dir(), "sft").find("not applicable to stage sft"),
            std::string::npos);
  EXPECT_NE(resolve_error("alpaca_pairs", pref_dir(), "pt").find("not applicable to stage pt"),
            std::string::npos);
  EXPECT_NE(resolve_error("no_columns", pref_dir(), "dpo")
                .find("a ranking dataset needs columns.chosen and columns.rejected"),
            std::string::npos);
  EXPECT_NE(resolve_error("alpaca_pairs", pref_dir(), "kto").find("not applicable to stage kto"),
            std::string::npos);

  ScratchDir dir("pref_info");
  dir.write("a.json", "[]");
  dir.write("t.txt", "x\n");
  dir.write("dataset_info.json", R"({
    "kto": {"file_name": "a.json", "ranking": true,
            "columns": {"chosen": "c", "rejected": "r", "kto_tag": "label"}},
    "txt": {"file_name": "t.txt", "ranking": true, "columns": {"chosen": "c", "rejected": "r"}},
    "half": {"file_name": "a.json", "ranking": true, "formatting": "sharegpt",
             "columns": {"messages": "m", "chosen": "c"}}})");
  EXPECT_NE(resolve_error("kto", dir.path(), "dpo").find("kto_tag is only used by stage kto"),
            std::string::npos);
  EXPECT_NE(resolve_error("txt", dir.path(), "rm").find("stage rm reads .json or .jsonl"),
            std::string::npos);
  EXPECT_NE(
      resolve_error("half", dir.path(), "dpo").find("needs columns.chosen and columns.rejected"),
      std::string::npos);
}

TEST(PrefReader, AlpacaPairsFollowTheConverter) {
  PreferenceSet set = read_preferences(attr_of("alpaca_pairs"), {});
  ASSERT_EQ(set.examples.size(), 4u);
  EXPECT_EQ(set.rows, 4);
  EXPECT_EQ(set.skipped_records, 0);
  const PreferenceExample& a = set.examples[0];
  EXPECT_EQ(flat(a.prompt), "user:Name a primary color.");  // empty input left out
  EXPECT_EQ(a.chosen.role, Role::kAssistant);
  EXPECT_EQ(a.chosen.content, "Red is a primary color.");
  EXPECT_EQ(a.rejected.role, Role::kAssistant);
  EXPECT_EQ(a.rejected.content, "Green.");
  EXPECT_EQ(a.system, "");
  EXPECT_EQ(a.source, pref_dir() + "/alpaca_pairs.json line 2");
  EXPECT_EQ(flat(set.examples[1].prompt), "user:Translate to French.\nGood morning");
  const PreferenceExample& h = set.examples[2];
  EXPECT_EQ(flat(h.prompt),
            "user:What day is it today?|assistant:It is Monday.|user:And tomorrow?|"
            "assistant:Tuesday.|user:And the day after?");
  EXPECT_EQ(h.system, "You answer briefly.");
  EXPECT_EQ(h.chosen.content, "Wednesday.");
  EXPECT_EQ(h.rejected.content, "It is Monday.");
  EXPECT_EQ(h.source, pref_dir() + "/alpaca_pairs.json line 14");
  EXPECT_EQ(flat(set.examples[3].prompt), "user:Is water wet?");  // no input key
}

TEST(PrefReader, SharegptPairsFollowTheConverter) {
  PreferenceSet set = read_preferences(attr_of("sharegpt_pairs"), {});
  ASSERT_EQ(set.examples.size(), 5u);
  const PreferenceExample& a = set.examples[0];
  EXPECT_EQ(flat(a.prompt), "user:What is 2 + 2?");
  EXPECT_EQ(a.chosen.role, Role::kAssistant);
  EXPECT_EQ(a.chosen.content, "2 + 2 = 4.");
  EXPECT_EQ(a.rejected.content, "5");
  EXPECT_EQ(a.source, pref_dir() + "/sharegpt_pairs.jsonl line 1");
  const PreferenceExample& b = set.examples[1];
  EXPECT_EQ(b.system, "Be terse.");  // the leading system message
  EXPECT_EQ(flat(b.prompt), "user:Hi|assistant:Hello.|user:Say bye");
  EXPECT_EQ(b.chosen.content, "Bye.");
  EXPECT_EQ(b.rejected.content, "Hello again.");
  EXPECT_EQ(set.examples[2].system, "You are a geography tutor.");  // the system column

  ReadOptions ro;
  ro.max_samples = 2;
  PreferenceSet two = read_preferences(attr_of("sharegpt_pairs"), ro);
  EXPECT_EQ(two.examples.size(), 2u);
  EXPECT_EQ(two.rows, 2);
}

TEST(PrefReader, FunctionTagAnswersAndObservationPrompts) {
  ScratchDir dir("pref_tags");
  dir.write("dataset_info.json",
            R"({"p": {"file_name": "p.jsonl", "ranking": true, "formatting": "sharegpt",
                      "columns": {"messages": "conversations", "chosen": "c", "rejected": "r"}}})");
  dir.write(
      "p.jsonl",
      R"({"conversations": [{"from": "human", "value": "q"}, {"from": "function_call", "value": "f"},)"
      R"( {"from": "observation", "value": "o"}], "c": {"from": "gpt", "value": "a"},)"
      R"( "r": {"from": "function_call", "value": "g"}})"
      "\n");
  PreferenceSet set = read_preferences(attr_of("p", dir.path()), {});
  ASSERT_EQ(set.examples.size(), 1u);
  EXPECT_EQ(flat(set.examples[0].prompt), "user:q|function:f|observation:o");
  EXPECT_EQ(set.examples[0].chosen.role, Role::kAssistant);
  EXPECT_EQ(set.examples[0].rejected.role, Role::kFunction);
}

TEST(PrefReader, ReadsTheBundledDpoDemo) {
  PreferenceSet set =
      read_preferences(attr_of("dpo_en_demo", std::string(UNILLM_SOURCE_DIR) + "/data"), {});
  EXPECT_EQ(set.examples.size(), 300u);
  EXPECT_EQ(set.rows, 300);
  EXPECT_EQ(set.skipped_records, 0);
  for (const auto& e : set.examples) {
    ASSERT_EQ(e.prompt.size() % 2, 1u) << e.source;
    EXPECT_EQ(e.prompt.back().role, Role::kUser) << e.source;
    EXPECT_FALSE(e.chosen.content.empty());
    EXPECT_NE(e.chosen.content, e.rejected.content);
  }
}

class PrefBadRecords : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_.write("dataset_info.json",
               R"({"sg": {"file_name": "sg.jsonl", "ranking": true, "formatting": "sharegpt",
                          "columns": {"messages": "conversations", "chosen": "chosen",
                                      "rejected": "rejected"}},
                   "al": {"file_name": "al.json", "ranking": true,
                          "columns": {"prompt": "instruction", "query": "input",
                                      "chosen": "chosen", "rejected": "rejected"}}})");
    const std::string h = R"({"from": "human", "value": "q"})";
    const std::string g = R"({"from": "gpt", "value": "a"})";
    auto rec = [](const std::string& conv, const std::string& rest) {
      return "{\"conversations\": [" + conv + "]" + rest + "}\n";
    };
    const std::string pair =
        R"(, "chosen": {"from": "gpt", "value": "c"}, "rejected": {"from": "gpt", "value": "r"})";
    sg_ = dir_.write(
        "sg.jsonl",
        rec(h, pair) +                                                                  // 1 ok
            rec(h, R"(, "rejected": {"from": "gpt", "value": "r"})") +                  // 2 missing
            rec(h, R"(, "chosen": null, "rejected": {"from": "gpt", "value": "r"})") +  // 3 null
            rec(h, R"(, "chosen": "c", "rejected": {"from": "gpt", "value": "r"})") +   // 4 type
            rec(h, R"(, "chosen": {"from": "gpt", "value": ""}, "rejected": )"
                   R"({"from": "gpt", "value": "r"})") +  // 5 empty
            rec(h, R"(, "chosen": {"from": "gpt", "value": "c"}, "rejected": )"
                   R"({"from": "gpt", "value": "c"})") +  // 6 same
            rec(h + ", " + g, pair) +                     // 7 even
            rec(g, pair) +                                // 8 role
            rec(h, R"(, "chosen": {"from": "human", "value": "c"}, "rejected": )"
                   R"({"from": "gpt", "value": "r"})") +  // 9 role
            rec(h, R"(, "chosen": {"from": "gpt", "value": "c"}, "rejected": {"from": "gpt"})") +
            rec("", pair) +  // 11
            rec(h, pair));   // 12 ok
    al_ = dir_.write("al.json",
                     "[\n"
                     "  {\"instruction\": \"i\", \"chosen\": \"c\", \"rejected\": \"r\"},\n"  // 2
                     "  {\"instruction\": \"i\", \"chosen\": \"c\"},\n"                       // 3
                     "  {\"instruction\": \"i\", \"chosen\": \"c\", \"rejected\": null},\n"   // 4
                     "  {\"instruction\": \"i\", \"chosen\": [\"c\"], \"rejected\": \"r\"},\n"
                     "  {\"instruction\": \"i\", \"chosen\": \"\", \"rejected\": \"r\"},\n"  // 6
                     "  {\"instruction\": \"i\",\n   \"chosen\": \"c\", \"rejected\": \"c\"},\n"
                     "  {\"chosen\": \"c\", \"rejected\": \"r\"},\n"                         // 9
                     "  {\"instruction\": \"i\", \"chosen\": \"c\", \"rejected\": \"r\"}\n"  // 10
                     "]\n");
  }

  std::string error_of(const std::string& name, ReadOptions ro = {}) {
    try {
      read_preferences(attr_of(name, dir_.path()), ro);
    } catch (const DataError& e) {
      return e.what();
    }
    return "";
  }

  // Every skip message of the file, one at a time: the first five come in skip_messages; the
  // rest are checked by cutting the file so that each becomes the first bad record.
  ScratchDir dir_{"pref_bad"};
  std::string sg_, al_;
};

TEST_F(PrefBadRecords, SharegptErrorsNameFileAndLine) {
  const std::string p = "[data] " + sg_;
  EXPECT_EQ(error_of("sg"), p + " line 2: key 'chosen' missing");
  ReadOptions ro;
  ro.skip_bad_records = true;
  PreferenceSet set = read_preferences(attr_of("sg", dir_.path()), ro);
  ASSERT_EQ(set.examples.size(), 2u);
  EXPECT_EQ(set.skipped_records, 10);
  EXPECT_EQ(set.rows, 12);
  EXPECT_EQ(set.examples[1].source, sg_ + " line 12");
  ASSERT_EQ(set.skip_messages.size(), 5u);
  EXPECT_EQ(set.skip_messages[0], p + " line 2: key 'chosen' missing");
  EXPECT_EQ(set.skip_messages[1], p + " line 3: key 'chosen' is null (no response to train on)");
  EXPECT_EQ(set.skip_messages[2], p + " line 4: key 'chosen' is not a message object (got string)");
  EXPECT_EQ(set.skip_messages[3], p + " line 5: key 'chosen' is empty (no response)");
  EXPECT_EQ(set.skip_messages[4],
            p + " line 6: keys 'chosen' and 'rejected' are identical (nothing to prefer)");
  // The later ones: keep only lines 7.. of the file, so that each is the first in turn.
  const std::string all = io::read_file_bytes(sg_);
  std::vector<std::string> lines;
  for (size_t pos = 0, nl; (nl = all.find('\n', pos)) != std::string::npos; pos = nl + 1)
    lines.push_back(all.substr(pos, nl - pos + 1));
  const std::vector<std::string> expected = {
      "sharegpt prompt has 2 turns, expected an odd number ending with a user turn",
      "sharegpt turn 1 has role 'gpt', expected a user turn",
      "key 'chosen' has role 'human', expected an assistant turn",
      "key 'rejected': key 'value' missing", "sharegpt prompt has no turns"};
  for (size_t k = 0; k < expected.size(); ++k) {
    dir_.write("sg.jsonl", lines[6 + k]);
    EXPECT_EQ(error_of("sg"), p + " line 1: " + expected[k]);
  }
  dir_.write("sg.jsonl", "");
  EXPECT_EQ(error_of("sg"), p + ": empty file (no records)");
}

TEST_F(PrefBadRecords, AlpacaErrorsNameTheLineWhereTheObjectStarts) {
  const std::string p = "[data] " + al_;
  EXPECT_EQ(error_of("al"), p + " line 3: key 'rejected' missing");
  ReadOptions ro;
  ro.skip_bad_records = true;
  PreferenceSet set = read_preferences(attr_of("al", dir_.path()), ro);
  ASSERT_EQ(set.examples.size(), 2u);
  EXPECT_EQ(set.skipped_records, 6);
  EXPECT_EQ(set.rows, 8);
  EXPECT_EQ(set.examples[1].source, al_ + " line 10");
  ASSERT_EQ(set.skip_messages.size(), 5u);
  EXPECT_EQ(set.skip_messages[1], p + " line 4: key 'rejected' is null (no response to train on)");
  EXPECT_EQ(set.skip_messages[2], p + " line 5: key 'chosen' is not a string (got array)");
  EXPECT_EQ(set.skip_messages[3], p + " line 6: key 'chosen' is empty (no response)");
  EXPECT_EQ(set.skip_messages[4],
            p + " line 7: keys 'chosen' and 'rejected' are identical (nothing to prefer)");
  dir_.write("al.json", "[{\"chosen\": \"c\", \"rejected\": \"r\"}]");
  EXPECT_EQ(error_of("al"), p + " line 1: key 'instruction' missing");
  ro.skip_bad_records = false;
  ro.max_samples = 1;  // stops before the first bad record
  dir_.write("al.json", "[{\"instruction\": \"i\", \"chosen\": \"c\", \"rejected\": \"r\"},\n{}]");
  EXPECT_EQ(read_preferences(attr_of("al", dir_.path()), ro).examples.size(), 1u);
}

TEST(PrefReader, RefusesWhatIsNotARankingDataset) {
  DatasetAttr a = attr_of("not_ranking", pref_dir(), "sft");
  EXPECT_THROW(read_preferences(a, {}), ConfigError);
  DatasetAttr r = attr_of("alpaca_pairs");
  r.columns.rejected.reset();
  EXPECT_THROW(read_preferences(r, {}), ConfigError);
}

}  // namespace
}  // namespace unillm::data
