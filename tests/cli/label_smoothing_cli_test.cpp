// `label_smoothing_factor` (HF's LabelSmoother) through `unillm train`: the smoothed loss in
// training and in evaluation (HF's prediction_step smooths its eval loss too), an exact resume,
// and the combinations it refuses. The loss itself is checked against HF's formula in
// tests/ops/label_smoothing_test.cpp.
#include <gtest/gtest.h>

#include "pt_run_util.h"

namespace unillm {
namespace {

using testing::pt_config;
using testing::run_unillm;

std::vector<double> values(const std::string& out, const char* key) {
  std::vector<double> v;
  for (const auto& l : testing::log_lines(out))
    if (l.contains(key)) v.push_back(l[key].get<double>());
  return v;
}

TEST(LabelSmoothing, SmoothsTrainingAndEvaluationLossesAndResumesExactly) {
  const std::string dir = testing::temp_dir("labelsmooth");
  const std::string still = "finetuning_type: full\nlearning_rate: 0\nval_size: 0.1\neval_strategy: steps\neval_steps: 4\n";
  for (const char* name : {"plain", "smooth"}) {
    const std::string extra = still + (std::string(name) == "smooth" ? "label_smoothing_factor: 0.1\n" : "");
    const auto r = run_unillm("train " + pt_config(dir, name, extra) + " max_steps=4 --quiet");
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  const auto pl = values(dir + "/plain", "loss"), sl = values(dir + "/smooth", "loss");
  ASSERT_EQ(pl.size(), 4u);
  ASSERT_EQ(sl.size(), 4u);
  // Smoothing moves probability mass to every token: with a trained model, whose predictions are
  // peaked, the smoothed loss is the larger.
  for (size_t i = 0; i < 4; ++i) EXPECT_GT(sl[i], pl[i]) << "step " << i + 1;
  const auto pe = values(dir + "/plain", "eval_loss"), se = values(dir + "/smooth", "eval_loss");
  ASSERT_EQ(pe.size(), 1u);
  ASSERT_EQ(se.size(), 1u);
  EXPECT_GT(se[0], pe[0]);
  testing::expect_exact_resume(testing::temp_dir("labelsmooth_resume"), "finetuning_type: full\nlabel_smoothing_factor: 0.1\n");
}

TEST(LabelSmoothing, RefusedWhereHfWouldNotSmooth) {
  const std::string dir = testing::temp_dir("labelsmooth_bad");
  const auto dpo = run_unillm("train " + pt_config(dir, "dpo", "label_smoothing_factor: 0.1\n") + " stage=dpo");
  EXPECT_NE(dpo.exit_code, 0);
  EXPECT_NE(dpo.err.find("label_smoothing_factor with stage dpo is not implemented"), std::string::npos) << dpo.err;
  const auto dft = run_unillm("train " + pt_config(dir, "dft", "label_smoothing_factor: 0.1\nuse_dft_loss: true\n"));
  EXPECT_NE(dft.exit_code, 0);
  EXPECT_NE(dft.err.find("label_smoothing_factor with use_dft_loss"), std::string::npos) << dft.err;
  const auto range = run_unillm("train " + pt_config(dir, "range", "label_smoothing_factor: 1.5\n"));
  EXPECT_NE(range.exit_code, 0);
  EXPECT_NE(range.err.find("label_smoothing_factor"), std::string::npos) << range.err;
}

}  // namespace
}  // namespace unillm
