// dataset_info.json's num_samples (data/num_samples.h) against goldens that numpy 1.26 and
// LLaMA-Factory 0.9.2's loader wrote (tools/make_num_samples_goldens.py): numpy's legacy MT19937
// stream, its permutation + choice picks over a sequence of datasets, and the rows each reader
// (sft, rm, pt) keeps when one generator goes through a load's train and eval datasets, with and
// without max_samples. Then the refusals.
#include "data/num_samples.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/preference_reader.h"
#include "data/record_reader.h"
#include "data/sft_reader.h"
#include "data_layer/data_test_util.h"
#include "support/expect.h"

namespace unillm::data {
namespace {

using nlohmann::json;

std::string dir() { return ::unillm::testing::source_path("tests/data/num_samples"); }

json goldens() { return json::parse(::unillm::testing::slurp(dir() + "/goldens.json")); }

TEST(NumSamples, LegacyMt19937StreamsMatchNumpy) {
  const json g = goldens();
  ASSERT_EQ(g["raw"].size(), 5u);
  for (const auto& c : g["raw"]) {
    NumpyRandomState r(c["seed"].get<uint64_t>());
    for (const auto& v : c["uint32"]) EXPECT_EQ(r.next_uint32(), v.get<uint32_t>()) << c["seed"];
  }
}

TEST(NumSamples, PicksMatchLlamaFactorysPermutationAndChoice) {
  const json g = goldens();
  ASSERT_EQ(g["picks"].size(), 3u);
  for (const auto& c : g["picks"]) {
    NumpyRandomState r(c["seed"].get<uint64_t>());  // one generator through the sequence
    for (const auto& d : c["draws"])
      EXPECT_EQ(sample_rows(d["rows"], d["num_samples"], r), d["indexes"].get<std::vector<int64_t>>())
          << c["seed"] << " " << d["rows"] << " " << d["num_samples"];
  }
}

// One dataset's rows as "prompt\x1fresponse" keys (the text for pt), in reading order.
std::vector<std::string> keys(const DatasetAttr& attr, const std::string& stage, const ReadOptions& ro) {
  std::vector<std::string> out;
  if (stage == "pt") return read_documents(attr, ro).texts;
  if (stage == "rm") {
    for (const auto& e : read_preferences(attr, ro).examples) out.push_back(e.prompt.back().content + "\x1f" + e.chosen.content);
    return out;
  }
  for (const auto& c : read_conversations(attr, ro).conversations)
    out.push_back(c.messages[c.messages.size() - 2].content + "\x1f" + c.messages.back().content);
  return out;
}

// The file's rows, unsampled: conversations and pairs by reading the dataset without num_samples
// (these files have no bad or empty rows); pt's lines straight from the file, empty ones included
// (LLaMA-Factory counts them as rows; the reader drops them after sampling).
std::vector<std::string> unsampled_rows(DatasetAttr attr, const std::string& stage) {
  if (stage == "pt") {
    std::ifstream in(attr.files.at(0));
    std::vector<std::string> lines;
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    return lines;
  }
  attr.num_samples.reset();
  return keys(attr, stage, {});
}

TEST(NumSamples, ReadersKeepLlamaFactorysRowsAcrossTrainAndEvalDatasets) {
  const json g = goldens();
  ASSERT_EQ(g["loads"].size(), 4u);
  std::map<std::string, std::vector<std::string>> rows_of;  // unsampled rows per stage/name
  for (const auto& load : g["loads"]) {
    const std::string stage = load["stage"];
    SCOPED_TRACE(load["seed"].dump() + " " + stage);
    NumpyRandomState rng(load["seed"].get<uint64_t>());
    ReadOptions ro;
    if (!load["max_samples"].is_null()) ro.max_samples = load["max_samples"].get<int64_t>();
    ro.sampling = &rng;
    for (const char* part : {"train_names", "eval_names"}) {
      std::vector<std::string> got, want;
      for (const std::string name : load[part]) {
        const DatasetAttr attr = resolve_datasets({name}, dir(), stage).at(0);
        for (auto& k : keys(attr, stage, ro)) got.push_back(std::move(k));
      }
      for (const auto& row : load[std::string(part) == "train_names" ? "train" : "eval"]) {
        const std::string name = row[0];
        auto it = rows_of.find(stage + "/" + name);
        if (it == rows_of.end())
          it = rows_of.emplace(stage + "/" + name, unsampled_rows(resolve_datasets({name}, dir(), stage).at(0), stage)).first;
        const std::string key = it->second.at(row[1].get<size_t>());
        if (!key.empty()) want.push_back(key);  // an empty document is sampled, then dropped
      }
      EXPECT_EQ(got, want) << part;
      EXPECT_FALSE(want.empty() && std::string(part) == "train_names");
    }
  }
}

TEST(NumSamples, BadValuesAndSeedsAreRefused) {
  testing::ScratchDir d("num_samples_bad");
  for (const char* bad : {"0", "-3", "2.5", "\"ten\""}) {
    std::ofstream(d.path() + "/dataset_info.json")
        << R"({"x": {"file_name": ")" << dir() << R"(/../pt/docs.txt", "num_samples": )" << bad << "}}";
    ::unillm::testing::expect_throw_with<ConfigError>([&] { resolve_datasets({"x"}, d.path(), "pt"); },
                                                      "'num_samples' must be a positive integer");
  }
  NumpyRandomState big(uint64_t{1} << 32);
  ::unillm::testing::expect_throw_with<ConfigError>([&] { big.next_uint32(); }, "numpy takes seeds up to 2^32 - 1");
}

}  // namespace
}  // namespace unillm::data
