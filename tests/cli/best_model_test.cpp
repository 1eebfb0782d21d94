// load_best_model_at_end from a LLaMA-Factory-style YAML: the weights left in output_dir are
// those of the checkpoint whose evaluation won under metric_for_best_model / greater_is_better.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "support/expect.h"
#include "support/run_cli.h"
#include "train_log_util.h"

namespace unillm {
namespace {

using testing::log_lines;
using testing::run_unillm;
using testing::slurp;
using testing::source_path;

// dir/cfg.yaml: full pt of stories260K on tinyshakespeare into `out`, then `rest`.
void write_config(const std::string& dir, const std::string& out, const std::string& rest) {
  std::ofstream(dir + "/cfg.yaml") << "model_name_or_path: " << source_path("assets/stories260K") << "\n"
                                   << "stage: pt\ndo_train: true\nfinetuning_type: full\ndataset: tinyshakespeare\n"
                                   << "dataset_dir: " << source_path("data") << "\noutput_dir: " << out << "\n"
                                   << rest;
}

TEST(BestModel, YamlKeepsTheWinningCheckpoint) {
  const std::string dir = testing::temp_dir("best_model"), out = dir + "/out";
  // A learning rate far too high makes the evaluation losses move a lot between checkpoints;
  // greater_is_better: true then picks the worst of them, which is not the last step's.
  write_config(dir, out,
               "cutoff_len: 128\noverwrite_output_dir: true\n"
               "per_device_train_batch_size: 8\nmax_steps: 12\nlearning_rate: 2.0\nval_size: 0.05\n"
               "eval_strategy: steps\neval_steps: 4\nsave_strategy: steps\nsave_steps: 4\n"
               "load_best_model_at_end: true\nmetric_for_best_model: eval_loss\n"
               "greater_is_better: true\nlogging_steps: 4\n");
  auto r = run_unillm("train " + dir + "/cfg.yaml --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  double best = -1;
  int best_step = 0;
  for (auto& l : log_lines(out))
    if (l.contains("eval_loss") && l["eval_step"].get<int>() <= 12 && l["eval_loss"].get<double>() > best)
      best = l["eval_loss"], best_step = l["eval_step"];
  ASSERT_GT(best_step, 0);
  ASSERT_LT(best_step, 12) << "the losses no longer make an earlier checkpoint win";
  const std::string ckpt = out + "/checkpoint-" + std::to_string(best_step);
  EXPECT_EQ(slurp(out + "/model.safetensors"), slurp(ckpt + "/model.safetensors"));
  auto state = nlohmann::json::parse(slurp(out + "/trainer_state.json"));
  EXPECT_EQ(state["best_model_checkpoint"], ckpt);
  EXPECT_EQ(state["best_metric"].get<double>(), best);

  // HF's rule: the save and evaluation strategies must match.
  auto bad = run_unillm("train " + dir + "/cfg.yaml save_strategy=no --quiet");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("load_best_model_at_end"), std::string::npos) << bad.err;
}

// save_strategy best (HF): a checkpoint exactly at the evaluations that beat the best so far
// (the first always does), none at the other evaluations or at the end; it needs a metric.
TEST(BestModel, SaveStrategyBestSavesTheImprovingEvaluations) {
  const std::string dir = testing::temp_dir("save_best"), out = dir + "/out";
  write_config(dir, out,
               "cutoff_len: 128\noverwrite_output_dir: true\n"
               "per_device_train_batch_size: 8\nmax_steps: 12\nlearning_rate: 2.0\nval_size: 0.05\n"
               "eval_strategy: steps\neval_steps: 2\nsave_strategy: best\nmetric_for_best_model: eval_loss\n"
               "greater_is_better: true\nlogging_steps: 2\n");
  auto r = run_unillm("train " + dir + "/cfg.yaml --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<int> want;  // the evaluations that set a new maximum
  double best = -1;
  for (auto& l : log_lines(out))
    if (l.contains("eval_loss") && l["eval_loss"].get<double>() > best) {
      best = l["eval_loss"];
      want.push_back(l["eval_step"].get<int>());
    }
  ASSERT_GE(want.size(), 1u);
  ASSERT_LT(want.size(), 6u) << "every evaluation improved: the test would not tell best from steps";
  std::vector<int> saved;
  for (int step = 1; step <= 12; ++step)
    if (std::ifstream(out + "/checkpoint-" + std::to_string(step) + "/trainer_state.json").good()) saved.push_back(step);
  EXPECT_EQ(saved, want);
  auto state = nlohmann::json::parse(slurp(out + "/trainer_state.json"));
  EXPECT_EQ(state["best_model_checkpoint"], out + "/checkpoint-" + std::to_string(want.back()));

  auto bad = run_unillm("train " + dir + "/cfg.yaml metric_for_best_model= --quiet");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("save_strategy best needs metric_for_best_model"), std::string::npos) << bad.err;
}

// logging_strategy epoch (HF's on_epoch_end): one log line per epoch, at the step that ends it,
// averaging that epoch's steps.
TEST(BestModel, LoggingStrategyEpochLogsEachEpochsEnd) {
  const std::string dir = testing::temp_dir("log_epoch"), out = dir + "/out";
  write_config(dir, out,
               "cutoff_len: 64\nmax_samples: 40\nper_device_train_batch_size: 8\nnum_train_epochs: 3\n"
               "logging_strategy: epoch\nsave_strategy: \"no\"\n");
  auto r = run_unillm("train " + dir + "/cfg.yaml --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<double> epochs;
  for (auto& l : log_lines(out))
    if (l.contains("loss") && !l.contains("eval_loss")) epochs.push_back(l["epoch"].get<double>());
  EXPECT_EQ(epochs, (std::vector<double>{1, 2, 3}));
  // logging_first_step (HF) adds step 1.
  r = run_unillm("train " + dir + "/cfg.yaml logging_first_step=true output_dir=" + dir + "/first --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<int> steps;
  for (auto& l : log_lines(dir + "/first"))
    if (l.contains("loss") && !l.contains("eval_loss")) steps.push_back(l["step"].get<int>());
  ASSERT_EQ(steps.size(), 4u);
  EXPECT_EQ(steps[0], 1);
}

}  // namespace
}  // namespace unillm
