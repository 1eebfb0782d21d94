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

TEST(BestModel, YamlKeepsTheWinningCheckpoint) {
  const std::string dir = testing::temp_dir("best_model"), out = dir + "/out";
  // A learning rate far too high makes the evaluation losses move a lot between checkpoints;
  // greater_is_better: true then picks the worst of them, which is not the last step's.
  std::ofstream(dir + "/cfg.yaml")
      << "model_name_or_path: " << source_path("assets/stories260K") << "\n"
      << "stage: pt\ndo_train: true\nfinetuning_type: full\ndataset: tinyshakespeare\n"
      << "dataset_dir: " << source_path("data") << "\n"
      << "cutoff_len: 128\noutput_dir: " << out << "\noverwrite_output_dir: true\n"
      << "per_device_train_batch_size: 8\nmax_steps: 12\nlearning_rate: 2.0\nval_size: 0.05\n"
      << "eval_strategy: steps\neval_steps: 4\nsave_strategy: steps\nsave_steps: 4\n"
      << "load_best_model_at_end: true\nmetric_for_best_model: eval_loss\n"
      << "greater_is_better: true\nlogging_steps: 4\n";
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

}  // namespace
}  // namespace unillm
