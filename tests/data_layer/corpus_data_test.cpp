// input_dir training data: `split` parsing and ranges (PaddleNLP's rule), rows from a preprocessed
// corpus equal to the rows of the same documents as raw text (packing groups, no packing, EOS
// override, txt and jsonl), loader batches equal, and the errors of preprocessing and loading.
#include "data/corpus_data.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "core/error.h"
#include "data/batch_loader.h"
#include "data/corpus_build.h"
#include "data/error.h"
#include "data_layer/data_test_util.h"

namespace unillm::data {
namespace {

namespace fs = std::filesystem;
using testing::ScratchDir;
using testing::stories_tokenizer;
using Rows = std::vector<std::vector<int32_t>>;

TEST(CorpusSplit, ParsesLikePaddleNlp) {
  EXPECT_EQ(parse_split("949,50,1"), (std::array<double, 3>{949, 50, 1}));
  EXPECT_EQ(parse_split("9/1"), (std::array<double, 3>{9, 1, 0}));
  EXPECT_EQ(parse_split(" 1 "), (std::array<double, 3>{1, 0, 0}));
  for (const char* bad : {"", "a,b", "1,2,3,4", "-1,2", "0,0,0", "1,,2", "1e999"})
    EXPECT_THROW(parse_split(bad), ConfigError) << bad;
}

TEST(CorpusSplit, RangesFollowMegatronRounding) {
  using R = std::array<std::pair<int64_t, int64_t>, 3>;
  EXPECT_EQ(split_ranges({949, 50, 1}, 1000), (R{{{0, 949}, {949, 999}, {999, 1000}}}));
  // 9.49 → 9, 0.5 → 0 (half to even), 0.01 → 0; the shortfall of 1 moves every end up.
  EXPECT_EQ(split_ranges({949, 50, 1}, 10), (R{{{0, 10}, {10, 10}, {10, 10}}}));
  EXPECT_EQ(split_ranges({1, 1, 0}, 5), (R{{{0, 3}, {3, 5}, {5, 5}}}));  // 2.5 → 2 twice
  EXPECT_EQ(split_ranges({1, 0, 0}, 7), (R{{{0, 7}, {7, 7}, {7, 7}}}));
}

// A scratch dir holding `doc.txt`: the first lines of tinyshakespeare (with its empty lines) plus
// lines that exercise the splitlines breaks, a dataset_info.json naming it, and its corpus.
struct Fixture {
  ScratchDir dir{"corpus_eq"};
  std::string prefix = dir.path() + "/corpus/shakes";
  Fixture() {
    std::ifstream in(std::string(UNILLM_SOURCE_DIR) + "/data/tinyshakespeare.txt");
    std::string text, line;
    for (int i = 0; i < 1500 && std::getline(in, line); ++i) text += line + "\n";
    text += "crlf line\r\nnext\rcarriage\x0bvt \xe2\x80\xa8 ls\n   \n\nlast without newline";
    dir.write("doc.txt", text);
    dir.write("dataset_info.json", R"({"doc": {"file_name": "doc.txt"}})");
    CorpusBuildOptions o;
    o.inputs = {dir.path() + "/doc.txt"};
    o.output_prefix = prefix;
    o.chunk_docs = 100;  // several chunks
    build_token_corpus(o, stories_tokenizer());
  }
  DataOptions raw(int64_t cutoff) const {
    DataOptions o;
    o.dataset = {"doc"};
    o.dataset_dir = dir.path();
    o.cutoff_len = cutoff;
    return o;
  }
  DataOptions corpus(int64_t cutoff, const std::string& split = "1,0,0") const {
    DataOptions o;
    o.input_dir = prefix;
    o.split = split;
    o.cutoff_len = cutoff;
    return o;
  }
};

Rows rows_of(const TokenizedDataset& d) {
  Rows out(d.num_rows());
  for (int64_t r = 0; r < d.num_rows(); ++r) {
    out[r].resize(d.row_length(r));
    d.read_row(r, out[r].data());
  }
  return out;
}

TEST(CorpusData, RowsEqualRawTextRowsOfTheSameDocuments) {
  Fixture f;
  struct Case {
    int64_t cutoff, group;
    bool packing;
    std::string eos;
  };
  for (const Case& c : {Case{5, 1000, true, ""}, Case{64, 1000, true, ""}, Case{64, 7, true, ""},
                        Case{8, 1, true, ""}, Case{16, 1000, false, ""},
                        Case{3000, 1000, false, ""}, Case{64, 1000, true, "<s>"}}) {
    DataOptions r = f.raw(c.cutoff), k = f.corpus(c.cutoff);
    r.preprocessing_batch_size = k.preprocessing_batch_size = c.group;
    r.packing = k.packing = c.packing;
    r.eos_token = k.eos_token = c.eos;
    auto [raw_train, raw_eval] = load_pretrain_data(r, stories_tokenizer());
    auto [train, eval] = load_pretrain_data(k, stories_tokenizer());
    const std::string what = "cutoff " + std::to_string(c.cutoff) + " group " +
                             std::to_string(c.group) + (c.packing ? "" : " no packing") + c.eos;
    ASSERT_TRUE(train.source) << what;
    EXPECT_EQ(train.documents, raw_train.documents) << what;
    EXPECT_EQ(train.num_tokens(), raw_train.num_tokens()) << what;
    EXPECT_EQ(rows_of(train), raw_train.rows) << what;
    EXPECT_EQ(eval.num_rows(), 0) << what;
  }
}

TEST(CorpusData, SplitRangesArePackedSeparatelyAsTrainAndEval) {
  Fixture f;
  auto [all, unused] = load_pretrain_data(f.corpus(64, "1,0,0"), stories_tokenizer());
  // The documents' ids, through the corpus (their equality with raw text is tested above).
  auto corpus = TokenCorpus::open(f.prefix);
  Rows docs(corpus->num_docs());
  for (int64_t d = 0; d < corpus->num_docs(); ++d) {
    docs[d].resize(corpus->doc_length(d));
    corpus->copy_tokens(corpus->doc_offset(d), corpus->doc_length(d), docs[d].data());
  }
  auto [train, eval] = load_pretrain_data(f.corpus(64, "949,50,1"), stories_tokenizer());
  const auto ranges = split_ranges({949, 50, 1}, corpus->num_docs());
  ASSERT_GT(ranges[1].second - ranges[1].first, 20);
  auto pack = [&](std::pair<int64_t, int64_t> r) {
    Rows sub(docs.begin() + r.first, docs.begin() + r.second);
    return pack_documents(sub, 64, stories_tokenizer().eos_id(), stories_tokenizer().bos_id(),
                          1000);
  };
  EXPECT_EQ(train.documents, ranges[0].second);
  EXPECT_EQ(rows_of(train), pack(ranges[0]));
  EXPECT_EQ(rows_of(eval), pack(ranges[1]));
  EXPECT_GT(eval.num_rows(), 0);
  EXPECT_LT(train.num_rows(), all.num_rows());
}

TEST(CorpusData, JsonlWithAnotherKeyEqualsRawJsonl) {
  ScratchDir dir("corpus_jsonl");
  std::ifstream in(std::string(UNILLM_SOURCE_DIR) + "/data/c4_demo.jsonl");
  std::string text, line;
  for (int i = 0; i < 150 && std::getline(in, line); ++i) text += line + "\n\n";  // blank lines too
  dir.write("c4.jsonl", text);
  dir.write("dataset_info.json",
            R"({"c4": {"file_name": "c4.jsonl", "columns": {"prompt": "text"}}})");
  CorpusBuildOptions o;
  o.inputs = {dir.path() + "/c4.jsonl"};
  o.output_prefix = dir.path() + "/c4";
  CorpusBuildStats s = build_token_corpus(o, stories_tokenizer());
  EXPECT_EQ(s.meta.num_docs, 150);
  DataOptions raw, k;
  raw.dataset = {"c4"};
  raw.dataset_dir = dir.path();
  k.input_dir = dir.path();  // a directory holding one corpus
  k.split = "100,0,0";
  raw.cutoff_len = k.cutoff_len = 128;
  EXPECT_EQ(rows_of(load_pretrain_data(k, stories_tokenizer()).first),
            load_pretrain_data(raw, stories_tokenizer()).first.rows);
  o.json_key = "content";
  try {
    build_token_corpus(o, stories_tokenizer());
    ADD_FAILURE() << "no error";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("c4.jsonl line 1: key 'content' missing"),
              std::string::npos)
        << e.what();
  }
}

TEST(CorpusData, LoaderBatchesEqualThoseOfRawText) {
  Fixture f;
  auto raw = load_pretrain_data(f.raw(32), stories_tokenizer()).first;
  auto corpus = load_pretrain_data(f.corpus(32), stories_tokenizer()).first;
  LoaderOptions lo;
  lo.batch_size = 3;
  lo.seed = 11;
  lo.mask_label_id = stories_tokenizer().eos_id();
  BatchLoader a(raw, lo), b(corpus, lo);
  ASSERT_EQ(a.batches_per_epoch(), b.batches_per_epoch());
  for (int64_t i = 0; i < 2 * a.batches_per_epoch(); ++i) {
    Batch x = a.next(), y = b.next();
    ASSERT_EQ(x.input_ids, y.input_ids) << "batch " << i;
    ASSERT_EQ(x.labels, y.labels) << "batch " << i;
    ASSERT_EQ(x.lengths, y.lengths) << "batch " << i;
  }
}

template <typename E>
void expect_error(const std::function<void()>& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no error, expected: " << needle;
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(CorpusData, BadInputsAreErrorsNamingFileAndLineAndLeaveNoCorpus) {
  ScratchDir dir("corpus_bad");
  auto build = [&](const std::string& name, const std::string& bytes) {
    return [&dir, name, bytes] {
      CorpusBuildOptions o;
      o.inputs = {dir.write(name, bytes)};
      o.output_prefix = dir.path() + "/out/c";
      build_token_corpus(o, stories_tokenizer());
    };
  };
  expect_error<DataError>(build("a.jsonl", "{\"text\": \"ok\"}\n{\"text\": oops}\n"),
                          "a.jsonl line 2: invalid JSON");
  expect_error<DataError>(build("b.jsonl", "{\"text\": 3}\n"),
                          "b.jsonl line 1: key 'text' is not a string");
  expect_error<DataError>(build("c.json", "[{\"text\": \"x\"}]\n"), "c.json line 1: a JSON array");
  expect_error<DataError>(build("d.txt",
                                "fine\nbad \xff"
                                " byte\n"),
                          "d.txt line 2: invalid UTF-8");
  expect_error<DataError>(build("e.txt", "\n\n"), "e.txt: no documents");
  expect_error<IoError>(
      [&] {
        CorpusBuildOptions o;
        o.inputs = {dir.path() + "/missing.txt"};
        o.output_prefix = dir.path() + "/out/c";
        build_token_corpus(o, stories_tokenizer());
      },
      "missing.txt");
  EXPECT_FALSE(fs::exists(dir.path() + "/out/c.idx"));
  EXPECT_FALSE(fs::exists(dir.path() + "/out/c.idx.tmp"));
}

TEST(CorpusData, LoadingErrorsNameInputDirAndTheCause) {
  Fixture f;
  auto load = [&](DataOptions o) { return [o] { load_pretrain_data(o, stories_tokenizer()); }; };
  DataOptions o = f.corpus(64);
  o.input_dir = f.dir.path() + "/nope";
  expect_error<ConfigError>(load(o), "input_dir '" + o.input_dir + "': no ");
  o = f.corpus(64, "1,x");
  expect_error<ConfigError>(load(o), "split '1,x'");
  o = f.corpus(64);
  o.dataset = {"doc"};
  expect_error<ConfigError>(load(o), "dataset cannot be used with input_dir");
  o = f.corpus(100000);
  expect_error<DataError>(load(o), "not enough data for one block");
  auto llama2 = io::Tokenizer::load(std::string(UNILLM_SOURCE_DIR) + "/assets/llama2-tokenizer");
  expect_error<ConfigError>([&] { load_pretrain_data(f.corpus(64), *llama2); },
                            "another tokenizer");
  fs::copy_file(f.prefix + ".idx", f.dir.path() + "/corpus/second.idx");
  o = f.corpus(64);
  o.input_dir = f.dir.path() + "/corpus";
  expect_error<ConfigError>(load(o), "holds 2 corpora");
}

}  // namespace
}  // namespace unillm::data
