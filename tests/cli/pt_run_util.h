// Shared by the optimiser CLI tests (optimizer, muon_adam_mini, low_rank, badam): a short pt run
// on tinyshakespeare, the check that its loss falls, and the kill -9 / resume check that a
// checkpoint continues the same run.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "support/expect.h"
#include "support/run_cli.h"
#include "train_log_util.h"

namespace unillm::testing {

// DIR/NAME.yaml: 12 steps of pt on `model` (default the bundled stories260K), a checkpoint every 6,
// output in DIR/NAME; `extra` lines are appended (finetuning_type, optim, learning_rate, …).
inline std::string pt_config(const std::string& dir, const std::string& name, const std::string& extra,
                             const std::string& model = "") {
  const std::string path = dir + "/" + name + ".yaml";
  std::ofstream(path) << "model_name_or_path: " << (model.empty() ? source_path("assets/stories260K") : model) << "\n"
                      << "stage: pt\ndo_train: true\n"
                      << "dataset: tinyshakespeare\ndataset_dir: " << source_path("data") << "\n"
                      << "cutoff_len: 64\nmax_samples: 200\n"
                      << "output_dir: " << dir << "/" << name << "\n"
                      << "per_device_train_batch_size: 4\nlr_scheduler_type: constant\n"
                      << "max_steps: 12\nlogging_steps: 1\nsave_steps: 6\nseed: 3\n"
                      << extra;
  return path;
}

// Mean of the first and last three of the 12 logged losses: the later ones are lower by 0.3.
inline void expect_loss_decreases(const std::string& out, const std::string& what) {
  const std::vector<double> l = train_losses(out);
  ASSERT_EQ(l.size(), 12u) << what;
  const double first = (l[0] + l[1] + l[2]) / 3, last = (l[9] + l[10] + l[11]) / 3;
  EXPECT_LT(last, first - 0.3) << what << ": loss " << first << " -> " << last;
}

// pt_config(extra) trained straight through (DIR/a), and killed after step `kill_after` then
// resumed from checkpoint-6 (DIR/b): the same losses, gradient norms and final weights.
inline void expect_exact_resume(const std::string& dir, const std::string& extra, int kill_after = 7,
                                const std::string& model = "") {
  const auto a = run_unillm("train " + pt_config(dir, "a", extra, model) + " --quiet");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const std::string cfg = pt_config(dir, "b", extra, model);
  const auto killed = run_unillm("train " + cfg + " --quiet --kill-after-step " + std::to_string(kill_after));
  EXPECT_EQ(killed.exit_code, 128 + 9) << killed.err;
  ASSERT_TRUE(std::filesystem::exists(dir + "/b/checkpoint-6/optimizer.safetensors"));
  const auto resumed = run_unillm("train " + cfg + " resume_from_checkpoint=true --quiet");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  const auto la = train_lines(dir + "/a"), lb = train_lines(dir + "/b");
  ASSERT_EQ(la.size(), lb.size());
  for (size_t i = 0; i < la.size(); ++i) {
    EXPECT_EQ(la[i]["loss"], lb[i]["loss"]) << "step " << i + 1;
    EXPECT_EQ(la[i]["grad_norm"], lb[i]["grad_norm"]) << "step " << i + 1;
  }
  EXPECT_EQ(slurp(dir + "/a/model.safetensors"), slurp(dir + "/b/model.safetensors"));
}

}  // namespace unillm::testing
