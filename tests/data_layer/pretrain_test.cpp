// Pretraining data: dataset_info.json resolution, txt/json/jsonl reading, packing (hand-computed
// on the stories260K tokenizer), no-packing rows, max_samples, val_size, bad records.
#include "data/pretrain.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "data/error.h"
#include "data_layer/data_test_util.h"

namespace unillm::data {
namespace {

using testing::fixture_dir;
using testing::ScratchDir;
using testing::stories_tokenizer;
using Rows = std::vector<std::vector<int32_t>>;

// Token ids of the three fixture documents under stories260K (BOS 1, EOS 2, adds BOS):
//   "one day a cat" → 353 411 328 261 280 294
//   "the dog ran"   → 265 400 428 352 303
//   "big sun"       → 370 262 379
DataOptions opts_for(const std::string& name) {
  DataOptions o;
  o.dataset = {name};
  o.dataset_dir = fixture_dir();
  o.cutoff_len = 5;
  return o;
}

TEST(PretrainData, DocumentTokensAreTheOnesTheHandComputationUses) {
  io::EncodeOptions eo{false, true};
  EXPECT_EQ(stories_tokenizer().encode("one day a cat", eo),
            (std::vector<int32_t>{353, 411, 328, 261, 280, 294}));
  EXPECT_EQ(stories_tokenizer().encode("the dog ran", eo),
            (std::vector<int32_t>{265, 400, 428, 352, 303}));
  EXPECT_EQ(stories_tokenizer().encode("big sun", eo), (std::vector<int32_t>{370, 262, 379}));
  EXPECT_TRUE(stories_tokenizer().adds_bos());
}

// Stream: 353 411 328 261 280 | 294 2 265 400 428 | 352 303 2 370 262 | 379 2 (dropped);
// each block's first token replaced by BOS (1).
const Rows kPacked5 = {{1, 411, 328, 261, 280}, {1, 2, 265, 400, 428}, {1, 303, 2, 370, 262}};

TEST(PretrainData, PacksTxtJsonAndJsonlIdentically) {
  for (const char* name : {"txt", "jsonl", "json"}) {
    auto [train, eval] = load_pretrain_data(opts_for(name), stories_tokenizer());
    EXPECT_EQ(train.rows, kPacked5) << name;
    EXPECT_EQ(train.documents, 3) << name;  // the empty line / blank jsonl line is no document
    EXPECT_TRUE(eval.rows.empty());
  }
}

TEST(PretrainData, PackingGroupsFollowPreprocessingBatchSize) {
  DataOptions o = opts_for("txt");
  o.preprocessing_batch_size = 2;
  // Group 1 = the empty line's row is not a document, so docs A, B: 13 tokens → 2 blocks, the
  // remainder 352 303 2 dropped; group 2 = C + EOS: 4 tokens < 5 → nothing.
  auto [train, eval] = load_pretrain_data(o, stories_tokenizer());
  EXPECT_EQ(train.rows, (Rows{{1, 411, 328, 261, 280}, {1, 2, 265, 400, 428}}));
}

TEST(PretrainData, PackDocumentsWithoutBosKeepsTheFirstToken) {
  Rows docs = {{10, 11, 12}, {13}, {14, 15}};
  // Stream 10 11 12 2 | 13 2 14 15 2: blocks of 3 = [10 11 12] [2 13 2] [14 15 2].
  EXPECT_EQ(pack_documents(docs, 3, 2, -1, 1000), (Rows{{10, 11, 12}, {2, 13, 2}, {14, 15, 2}}));
  EXPECT_EQ(pack_documents(docs, 3, 2, 1, 1000), (Rows{{1, 11, 12}, {1, 13, 2}, {1, 15, 2}}));
  // Groups of 2 documents, blocks of 4: [10 11 12 2 13 2] → 1 block; [14 15 2] → none.
  EXPECT_EQ(pack_documents(docs, 4, 2, -1, 2), (Rows{{10, 11, 12, 2}}));
}

TEST(PretrainData, NoPackingRowsAreBosTokensEosTruncated) {
  DataOptions o = opts_for("jsonl");
  o.packing = false;
  o.cutoff_len = 6;
  auto [train, eval] = load_pretrain_data(o, stories_tokenizer());
  EXPECT_EQ(
      train.rows,
      (Rows{{1, 353, 411, 328, 261, 280}, {1, 265, 400, 428, 352, 303}, {1, 370, 262, 379, 2}}));
}

TEST(PretrainData, Llama3TemplateChoosesEndOfTextAndAnExplicitEosMustExist) {
  DataOptions o = opts_for("txt");
  o.eos_token = "</s>";
  EXPECT_EQ(pretrain_eos_id(o, stories_tokenizer()), 2);
  o.eos_token = "";
  o.template_name = "llama3";  // <|end_of_text|> is not in this vocabulary
  EXPECT_THROW(pretrain_eos_id(o, stories_tokenizer()), ConfigError);
}

TEST(PretrainData, MaxSamplesTakesTheFirstRowsOfEachDataset) {
  DataOptions o = opts_for("jsonl");
  o.packing = false;
  o.max_samples = 2;
  o.dataset = {"jsonl", "json"};
  auto [train, eval] = load_pretrain_data(o, stories_tokenizer());
  ASSERT_EQ(train.rows.size(), 4u);  // two of each, in order
  EXPECT_EQ(train.rows[1][1], 265);
  EXPECT_EQ(train.rows[2][1], 353);
  // txt: the empty line is a row (as in HF's text loader), so max_samples 2 keeps one document.
  o.dataset = {"txt"};
  EXPECT_EQ(load_pretrain_data(o, stories_tokenizer()).first.rows.size(), 1u);
}

TEST(PretrainData, ValSizeFractionAndCountSplitAfterProcessing) {
  DataOptions o = opts_for("txt");
  o.packing = false;
  o.val_size = 0.5;  // 3 rows: ceil(1.5) = 2 to eval
  auto [train, eval] = load_pretrain_data(o, stories_tokenizer());
  EXPECT_EQ(train.rows.size(), 1u);
  EXPECT_EQ(eval.rows.size(), 2u);
  // numpy default_rng(42).permutation(3) = [2, 1, 0] → eval rows 2, 1; train row 0.
  EXPECT_EQ(eval.rows[0][1], 370);
  EXPECT_EQ(eval.rows[1][1], 265);
  EXPECT_EQ(train.rows[0][1], 353);
  o.val_size = 2;  // a count
  auto [train2, eval2] = load_pretrain_data(o, stories_tokenizer());
  EXPECT_EQ(train2.rows.size(), 1u);
  EXPECT_EQ(eval2.rows.size(), 2u);
  o.val_size = 3;  // all rows: nothing left to train on
  EXPECT_THROW(load_pretrain_data(o, stories_tokenizer()), DataError);
}

TEST(PretrainData, EvalDatasetIsProcessedTheSameWay) {
  DataOptions o = opts_for("txt");
  o.eval_dataset = {"json"};
  auto [train, eval] = load_pretrain_data(o, stories_tokenizer());
  EXPECT_EQ(eval.rows, kPacked5);
  o.val_size = 0.5;
  EXPECT_THROW(load_pretrain_data(o, stories_tokenizer()), ConfigError);
}

TEST(PretrainData, TooLittleDataForOneBlockIsAnError) {
  DataOptions o = opts_for("txt");
  o.cutoff_len = 100;
  try {
    load_pretrain_data(o, stories_tokenizer());
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("one block of 100"), std::string::npos) << e.what();
  }
}

std::string error_of(const DataOptions& o) {
  try {
    load_pretrain_data(o, stories_tokenizer());
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(PretrainData, BadRecordsNameFileAndLine) {
  ScratchDir dir("pt_bad");
  dir.write("dataset_info.json",
            R"({"bad": {"file_name": "bad.jsonl", "columns": {"prompt": "text"}},
      "arr": {"file_name": "bad.json"}, "empty": {"file_name": "empty.txt"},
      "gone": {"file_name": "missing.jsonl"}, "hub": {"hf_hub_url": "a/b"}})");
  dir.write("bad.jsonl",
            "{\"text\": \"one day a cat\"}\n{\"text\": \"the dog\"\n{\"txt\": \"x\"}\n"
            "{\"text\": 5}\n[1]\n{\"text\": \"big sun\"}\n");
  dir.write("bad.json", "[\n {\"text\": \"one day\"},\n\n {\"body\": \"x\"}\n]\n");
  dir.write("empty.txt", "");
  DataOptions o;
  o.dataset_dir = dir.path();
  o.cutoff_len = 2;
  o.dataset = {"bad"};
  const std::string bad = dir.path() + "/bad.jsonl";
  EXPECT_EQ(error_of(o), "[data] " + bad + " line 2: invalid JSON");
  o.dataset = {"arr"};
  EXPECT_EQ(error_of(o), "[data] " + dir.path() + "/bad.json line 4: key 'text' missing");
  o.dataset = {"empty"};
  EXPECT_EQ(error_of(o), "[data] " + dir.path() + "/empty.txt: empty file (no records)");
  o.dataset = {"gone"};
  EXPECT_NE(error_of(o).find("missing.jsonl not found"), std::string::npos);
  o.dataset = {"hub"};
  EXPECT_NE(error_of(o).find("not available offline"), std::string::npos);
  o.dataset = {"nope"};
  EXPECT_NE(error_of(o).find("undefined dataset 'nope'"), std::string::npos);

  o.dataset = {"bad"};
  o.skip_bad_records = true;
  auto [train, eval] = load_pretrain_data(o, stories_tokenizer());
  EXPECT_EQ(train.skipped_records, 4);  // invalid JSON, missing key, non-string, non-object
  EXPECT_EQ(train.documents, 2);
  ASSERT_EQ(train.skip_messages.size(), 4u);
  EXPECT_EQ(train.skip_messages[1], "[data] " + bad + " line 3: key 'text' missing");
  EXPECT_EQ(train.skip_messages[2],
            "[data] " + bad + " line 4: key 'text' is not a string (got number)");
  EXPECT_EQ(train.skip_messages[3], "[data] " + bad + " line 5: expected a JSON object");
}

TEST(PretrainData, ColumnsPromptAndQueryJoinWithNewline) {
  ScratchDir dir("pt_cols");
  dir.write("dataset_info.json",
            R"({"q": {"file_name": "q.jsonl", "columns": {"prompt": "a", "query": "b"}}})");
  dir.write("q.jsonl",
            "{\"a\": \"big\", \"b\": \"sun\"}\n{\"a\": \"\", \"b\": \"sun\"}\n{\"a\": \"big\"}\n");
  DataOptions o;
  o.dataset_dir = dir.path();
  o.dataset = {"q"};
  o.packing = false;
  o.cutoff_len = 64;
  auto [train, eval] = load_pretrain_data(o, stories_tokenizer());
  io::EncodeOptions eo{false, true};
  auto row = [&](const std::string& s) {
    std::vector<int32_t> r{1};
    for (int32_t t : stories_tokenizer().encode(s, eo)) r.push_back(t);
    r.push_back(2);
    return r;
  };
  EXPECT_EQ(train.rows, (Rows{row("big\nsun"), row("sun"), row("big")}));
}

}  // namespace
}  // namespace unillm::data
