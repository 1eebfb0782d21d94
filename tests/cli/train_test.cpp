// `unillm train` end to end on the bundled model: exact resume after kill -9, a crash during a
// checkpoint write, outputs, and bad configs.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/expect.h"
#include "support/run_cli.h"
#include "train_log_util.h"

namespace unillm {
namespace {

namespace fs = std::filesystem;
using testing::run_unillm;
using testing::shell_quote;
using testing::source_path;

using testing::slurp;

// A small pt config on tinyshakespeare writing into out; extra lines are appended.
std::string write_config(const std::string& dir, const std::string& out, const std::string& extra = "") {
  std::string path = dir + "/cfg.yaml";
  std::ofstream(path) << "model_name_or_path: " << source_path("assets/stories260K") << "\n"
                      << "stage: pt\nfinetuning_type: full\ndo_train: true\n"
                      << "dataset: tinyshakespeare\ndataset_dir: " << source_path("data") << "\n"
                      << "cutoff_len: 64\nmax_samples: 600\n"
                      << "output_dir: " << out << "\n"
                      << "per_device_train_batch_size: 4\ngradient_accumulation_steps: 2\n"
                      << "learning_rate: 2.0e-3\nlr_scheduler_type: cosine\nwarmup_steps: 3\n"
                      << "max_steps: 20\nlogging_steps: 1\nsave_steps: 5\nseed: 7\n"
                      << extra;
  return path;
}

using testing::log_lines;

void expect_same_run(const std::string& a, const std::string& b) {
  auto la = log_lines(a), lb = log_lines(b);
  ASSERT_EQ(la.size(), 20u);
  ASSERT_EQ(lb.size(), 20u);
  for (size_t i = 0; i < la.size(); ++i) {
    EXPECT_EQ(la[i]["loss"], lb[i]["loss"]) << "step " << i + 1;
    EXPECT_EQ(la[i]["grad_norm"], lb[i]["grad_norm"]) << "step " << i + 1;  // full precision
    EXPECT_EQ(la[i]["lr"], lb[i]["lr"]) << "step " << i + 1;
  }
  EXPECT_EQ(slurp(a + "/model.safetensors"), slurp(b + "/model.safetensors")) << "final weights differ";
}

TEST(Train, ResumeAfterKillIsExact) {
  std::string dir = testing::temp_dir("resume");
  auto straight = run_unillm("train " + write_config(dir, dir + "/a") + " --quiet");
  ASSERT_EQ(straight.exit_code, 0) << straight.err;
  std::string cfg = dir + "/b.yaml";
  fs::copy_file(write_config(dir, dir + "/b"), cfg);
  auto killed = run_unillm("train " + cfg + " --quiet --kill-after-step 10");
  EXPECT_EQ(killed.exit_code, 128 + 9) << killed.err;
  ASSERT_TRUE(fs::exists(dir + "/b/checkpoint-10/trainer_state.json"));
  auto resumed = run_unillm("train " + cfg + " resume_from_checkpoint=true --quiet");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  expect_same_run(dir + "/a", dir + "/b");
  // A damaged checkpoint is refused with the file named, and nothing is trained from it.
  fs::resize_file(dir + "/b/checkpoint-15/optimizer.safetensors", 100);
  auto bad = run_unillm("train " + cfg + " resume_from_checkpoint=" + dir + "/b/checkpoint-15 --quiet");
  EXPECT_EQ(bad.exit_code, 1) << bad.err;
  EXPECT_NE(bad.err.find("optimizer.safetensors"), std::string::npos) << bad.err;
  for (const char* f : {"trainer_state.json", "train_results.json", "all_results.json", "config.json", "tokenizer.json"})
    EXPECT_TRUE(fs::exists(dir + "/b/" + std::string(f))) << f;
}

TEST(Train, KillDuringCheckpointWriteKeepsThePreviousOne) {
  std::string dir = testing::temp_dir("killsave");
  auto straight = run_unillm("train " + write_config(dir, dir + "/a") + " --quiet");
  ASSERT_EQ(straight.exit_code, 0) << straight.err;
  std::string cfg = write_config(dir, dir + "/b");
  auto killed = run_unillm("train " + cfg + " --quiet --kill-during-save 10");
  EXPECT_EQ(killed.exit_code, 128 + 9) << killed.err;
  EXPECT_TRUE(fs::exists(dir + "/b/checkpoint-5/trainer_state.json"));
  EXPECT_FALSE(fs::exists(dir + "/b/checkpoint-10"));
  int staged = 0;  // the kill left the write's staging dir, which the resume removes
  for (const auto& e : fs::directory_iterator(dir + "/b"))
    staged += e.path().filename().string().rfind("tmp-checkpoint-10.unillm-", 0) == 0;
  EXPECT_EQ(staged, 1);
  // The intact checkpoint loads as a model, and resuming from it reproduces the straight run.
  auto gen = run_unillm("generate --model " + dir + "/b/checkpoint-5 --prompt-ids 1 --max-new-tokens 3 --quiet");
  EXPECT_EQ(gen.exit_code, 0) << gen.err;
  auto resumed = run_unillm("train " + cfg + " resume_from_checkpoint=true --quiet");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  for (const auto& e : fs::directory_iterator(dir + "/b"))  // the killed write's staging dir is gone
    EXPECT_EQ(e.path().filename().string().rfind("tmp-", 0), std::string::npos) << e.path();
  expect_same_run(dir + "/a", dir + "/b");
}

void expect_error(const testing::CliResult& r, const std::string& needle) {
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << "missing '" << needle << "' in: " << r.err;
}

TEST(Train, BadConfigsAndDataAreClearErrors) {
  std::string dir = testing::temp_dir("badcfg");
  std::string cfg = write_config(dir, dir + "/out", "learning_rat: 1.0e-3\n");
  expect_error(run_unillm("train " + cfg), "did you mean 'learning_rate'");
  cfg = write_config(dir, dir + "/out", "");
  expect_error(run_unillm("train " + cfg + " per_device_train_batch_size=-1"), "per_device_train_batch_size");
  expect_error(run_unillm("train " + cfg + " deepspeed=ds.json"), "deepspeed");
  fs::create_directories(dir + "/data");
  std::ofstream(dir + "/data/dataset_info.json") << R"({"bad": {"file_name": "bad.jsonl", "columns": {"prompt": "text"}}})";
  std::ofstream(dir + "/data/bad.jsonl") << "{\"text\": \"fine\"}\n{\"text\": \"also fine\"}\n{\"txt\": \"oops\"}\n";
  auto r = run_unillm("train " + cfg + " dataset=bad dataset_dir=" + dir + "/data");
  expect_error(r, "bad.jsonl");
  EXPECT_NE(r.err.find("line 3"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir + "/out/model.safetensors"));
  fs::create_directories(dir + "/full");
  std::ofstream(dir + "/full/keep.txt") << "x";
  expect_error(run_unillm("train " + write_config(dir, dir + "/full")), "overwrite_output_dir");
}

// cutoff_len beyond the model's max_position_embeddings trains (as LLaMA-Factory) with a warning.
TEST(Train, CutoffBeyondThePositionWindowWarns) {
  std::string dir = testing::temp_dir("cutoffwarn");
  auto r = run_unillm("train " + write_config(dir, dir + "/out", "") + " cutoff_len=1024 max_steps=1 --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("cutoff_len 1024 is beyond the model's max_position_embeddings 512"), std::string::npos) << r.err;
  auto quiet = run_unillm("train " + write_config(dir, dir + "/out2", "") + " max_steps=1 --quiet");
  ASSERT_EQ(quiet.exit_code, 0) << quiet.err;
  EXPECT_EQ(quiet.err.find("max_position_embeddings"), std::string::npos) << quiet.err;
}

}  // namespace
}  // namespace unillm
