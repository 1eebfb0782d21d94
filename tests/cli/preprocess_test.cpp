// `unillm preprocess` + `input_dir` training end to end on the bundled model: the same losses,
// gradient norms, eval losses and weights as raw-text training on the same documents (YAML and
// PaddleNLP JSON), clear errors, and peak memory that does not grow with the corpus.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "data/corpus_data.h"
#include "support/expect.h"
#include "support/run_cli.h"
#include "train_log_util.h"

namespace unillm {
namespace {

namespace fs = std::filesystem;
using testing::log_lines;
using testing::run_unillm;
using testing::slurp;
using testing::source_path;

void write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// The common part of the three runs; data keys are added by each. A constant learning rate: a
// PaddleNLP run_pretrain.py file anneals linear and cosine its own way (train/lr_schedule.h).
std::string common_yaml(const std::string& out, bool eval = true) {
  return "model_name_or_path: " + source_path("assets/stories260K") +
         "\nstage: pt\nfinetuning_type: full\ndo_train: true\ncutoff_len: 64\nlr_scheduler_type: "
         "constant\n"
         "per_device_train_batch_size: 4\nlearning_rate: 2.0e-3\nmax_steps: 8\nlogging_steps: 1\n"
         "save_strategy: 'no'\nseed: 7\ndisable_gradient_checkpointing: true\n" +
         (eval ? "eval_strategy: steps\neval_steps: 4\nper_device_eval_batch_size: 4\n" : "") +
         "output_dir: " + out + "\n";
}

void expect_same_logs(const std::string& a, const std::string& b, const std::string& what) {
  auto la = log_lines(a), lb = log_lines(b);
  ASSERT_EQ(la.size(), 10u) << what;  // 8 steps + 2 evaluations
  ASSERT_EQ(la.size(), lb.size()) << what;
  for (size_t i = 0; i < la.size(); ++i)
    for (const char* k : {"loss", "grad_norm", "eval_loss"})
      EXPECT_EQ(la[i].value(k, -1.0), lb[i].value(k, -1.0)) << what << " line " << i << " " << k;
  EXPECT_EQ(slurp(a + "/model.safetensors"), slurp(b + "/model.safetensors")) << what;
}

TEST(Preprocess, HelpListsTheCommand) {
  auto r = run_unillm("--help");
  EXPECT_NE(r.out.find("preprocess"), std::string::npos) << r.out;
  r = run_unillm("preprocess --help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("--json-key"), std::string::npos) << r.out;
}

// Documents = the non-empty lines of 800 lines of tinyshakespeare. Raw text: train docs in a.txt,
// eval docs in b.txt (split 90,10,0 of them, computed by the documented rule). Corpus: one file.
TEST(Preprocess, InputDirTrainsAndEvaluatesExactlyAsRawText) {
  const std::string dir = testing::temp_dir("preprocess");
  std::ifstream in(source_path("data/tinyshakespeare.txt"));
  std::vector<std::string> docs;
  std::string all, line;
  for (int i = 0; i < 800 && std::getline(in, line); ++i) {
    all += line + "\n";
    if (!line.empty()) docs.push_back(line);
  }
  write(dir + "/all.txt", all);
  const auto ranges = data::split_ranges({90, 10, 0}, static_cast<int64_t>(docs.size()));
  std::string a, b;
  for (int64_t d = ranges[0].first; d < ranges[0].second; ++d) a += docs[d] + "\n";
  for (int64_t d = ranges[1].first; d < ranges[1].second; ++d) b += docs[d] + "\n";
  write(dir + "/a.txt", a);
  write(dir + "/b.txt", b);
  write(dir + "/dataset_info.json",
        R"({"a": {"file_name": "a.txt"}, "b": {"file_name": "b.txt"}})");
  auto pre = run_unillm("preprocess --model " + source_path("assets/stories260K") + " --input " +
                        dir + "/all.txt --output " + dir + "/corpus/shakes --quiet");
  ASSERT_EQ(pre.exit_code, 0) << pre.err;
  EXPECT_NE(pre.out.find(std::to_string(docs.size()) + " documents"), std::string::npos) << pre.out;

  write(dir + "/raw.yaml",
        common_yaml(dir + "/out-raw") + "dataset: a\neval_dataset: b\ndataset_dir: " + dir + "\n");
  write(dir + "/corpus.yaml", common_yaml(dir + "/out-corpus") + "input_dir: " + dir +
                                  "/corpus/shakes\nsplit: 90,10,0\n");
  // PaddleNLP run_pretrain.py-style arguments: input_dir implies stage pt, max_seq_length is the
  // block length, recompute is off by default.
  write(dir + "/paddle.json", R"({"model_name_or_path": ")" + source_path("assets/stories260K") +
                                  R"(", "input_dir": ")" + dir + R"(/corpus", "split": "90,10,0",
      "max_seq_length": 64, "per_device_train_batch_size": 4, "learning_rate": 2.0e-3,
      "lr_scheduler_type": "constant", "continue_training": true,
      "max_steps": 8, "logging_steps": 1, "save_strategy": "no", "seed": 7, "do_train": true,
      "evaluation_strategy": "steps", "eval_steps": 4, "per_device_eval_batch_size": 4,
      "data_impl": "mmap", "output_dir": ")" +
                                  dir + R"(/out-paddle"})");
  for (const char* cfg : {"raw.yaml", "corpus.yaml", "paddle.json"}) {
    auto r = run_unillm("train " + dir + "/" + cfg + " --quiet");
    ASSERT_EQ(r.exit_code, 0) << cfg << ": " << r.err;
  }
  expect_same_logs(dir + "/out-raw", dir + "/out-corpus", "yaml input_dir vs raw text");
  expect_same_logs(dir + "/out-raw", dir + "/out-paddle", "PaddleNLP json input_dir vs raw text");
}

void expect_error(const testing::CliResult& r, const std::string& needle) {
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << "missing '" << needle << "' in: " << r.err;
}

TEST(Preprocess, BadInputsAndKeysAreClearErrors) {
  const std::string dir = testing::temp_dir("preprocess_bad");
  const std::string model = source_path("assets/stories260K");
  write(dir + "/bad.jsonl", "{\"text\": \"fine\"}\n{\"txt\": \"oops\"}\n");
  expect_error(run_unillm("preprocess --model " + model + " --input " + dir +
                          "/bad.jsonl --output " + dir + "/c"),
               "bad.jsonl line 2: key 'text' missing");
  EXPECT_FALSE(fs::exists(dir + "/c.idx"));
  expect_error(run_unillm("preprocess --model " + model + " --output " + dir + "/c"), "--input");
  write(dir + "/ok.txt", "one day a cat\nthe dog ran\n");
  ASSERT_EQ(run_unillm("preprocess --quiet --model " + model + " --input " + dir +
                       "/ok.txt --output " + dir + "/c")
                .exit_code,
            0);
  write(dir + "/cfg.yaml",
        common_yaml(dir + "/out", false) + "input_dir: " + dir + "/c\nsplit: 1,0,0\n");
  expect_error(run_unillm("train " + dir + "/cfg.yaml input_dir=" + dir + "/nope"), "input_dir");
  expect_error(run_unillm("train " + dir + "/cfg.yaml split=1,a"), "key 'split'");
  expect_error(run_unillm("train " + dir + "/cfg.yaml dataset=c4_demo"),
               "input_dir cannot be used with dataset");
  fs::resize_file(dir + "/c.bin", fs::file_size(dir + "/c.bin") - 1);
  expect_error(run_unillm("train " + dir + "/cfg.yaml cutoff_len=4"), dir + "/c.bin");
}

// Runs `unillm ARGS` under GNU time; returns the peak RSS in MB (-1 when it failed).
double peak_rss_mb(const std::string& args, const std::string& dir) {
  const std::string cmd = "/usr/bin/time -f %M -o " + dir + "/rss.txt " +
                          std::string(UNILLM_BINARY_DIR) + "/unillm " + args + " >" + dir +
                          "/cmd.log 2>&1";
  if (std::system(cmd.c_str()) != 0) return -1;
  std::ifstream in(dir + "/rss.txt");
  double kb = -1;
  in >> kb;
  return kb / 1024.0;
}

// Synthetic documents of 20-400 words from a fixed word list, about mb megabytes.
void write_synthetic(const std::string& path, int mb) {
  std::ifstream in(source_path("data/tinyshakespeare.txt"));
  std::vector<std::string> words;
  for (std::string w; in >> w && words.size() < 5000;) words.push_back(w);
  std::mt19937 rng(7);
  std::ofstream out(path, std::ios::binary);
  for (int64_t written = 0; written < int64_t{mb} << 20;) {
    std::string line;
    for (int n = 20 + static_cast<int>(rng() % 381); n > 0; --n)
      line += words[rng() % words.size()] + (n > 1 ? " " : "\n");
    out << line;
    written += static_cast<int64_t>(line.size());
  }
}

// The several-hundred-MB version of this check is bench/corpus_memory.sh.
TEST(Preprocess, PeakMemoryOfTrainingDoesNotGrowWithTheCorpus) {
  if (!fs::exists("/usr/bin/time")) GTEST_SKIP() << "needs GNU time (/usr/bin/time)";
  const std::string dir = testing::temp_dir("preprocess_rss");
  const std::string model = source_path("assets/stories260K");
  double peak[2];
  for (int i = 0; i < 2; ++i) {
    const std::string name = i == 0 ? "small" : "big";
    write_synthetic(dir + "/" + name + ".txt", i == 0 ? 1 : 16);
    ASSERT_EQ(run_unillm("preprocess --quiet --model " + model + " --input " + dir + "/" + name +
                         ".txt --output " + dir + "/" + name)
                  .exit_code,
              0);
    write(dir + "/" + name + ".yaml", "model_name_or_path: " + model +
                                          "\nstage: pt\nfinetuning_type: full\ndo_train: true\n"
                                          "cutoff_len: 256\nper_device_train_batch_size: "
                                          "8\nmax_steps: 3\nsave_strategy: 'no'\nsplit: 1,0,0\n"
                                          "input_dir: " +
                                          dir + "/" + name + "\noutput_dir: " + dir + "/out-" +
                                          name + "\n");
    peak[i] = peak_rss_mb("train " + dir + "/" + name + ".yaml --quiet", dir);
    ASSERT_GT(peak[i], 0) << slurp(dir + "/cmd.log");
  }
  // The big corpus holds 9.6 M ids (19 MB as u16; as rows in memory, int32, 38 MB and more).
  // Training from it may only add its per-group table and its block permutation (0.3 MB); the
  // peak of the same run varies by a few MB between runs, hence the margin.
  EXPECT_LT(peak[1], peak[0] + 10.0)
      << "peak RSS " << peak[0] << " MB (1 MB of text) vs " << peak[1] << " MB (16 MB)";
  std::printf(
      "peak RSS of 3 training steps: %.1f MB from 1 MB of text, %.1f MB from 16 MB (corpus %.1f "
      "MB)\n",
      peak[0], peak[1], fs::file_size(dir + "/big.bin") / 1048576.0);
}

}  // namespace
}  // namespace unillm
