// `unillm train` with LLaMA-Factory's SFT loss variants (use_dft_loss, use_eaft_loss,
// use_asft_loss) on the bundled model and data: they train and log their own loss; the configs
// they cannot go with are refused with the key named. The losses' values are checked in tests/ops
// and against LLaMA-Factory's formulas in tests/reference/sft_loss_check.py.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "support/expect.h"
#include "run_compare_util.h"
#include "support/run_cli.h"
#include "train_log_util.h"

namespace unillm {
namespace {

using testing::run_unillm;
using testing::source_path;

std::string config(const std::string& dir, const std::string& name, const std::string& extra) {
  const std::string path = dir + "/" + name + ".yaml";
  std::ofstream(path) << "model_name_or_path: " << source_path("assets/stories260K") << "\n"
                      << "do_train: true\ndataset: alpaca_en_demo\ndataset_dir: "
                      << source_path("data") << "\n"
                      << "template: alpaca\ncutoff_len: 96\nmax_samples: 64\n"
                      << "output_dir: " << dir << "/" << name << "\n"
                      << "per_device_train_batch_size: 4\nlearning_rate: 5.0e-3\n"
                      << "max_steps: 8\nlogging_steps: 1\nsave_strategy: 'no'\nseed: 5\n"
                      << extra;
  return path;
}

TEST(SftLoss, DftTrainsAndLogsItsLoss) {
  const std::string dir = testing::temp_dir("sft_dft");
  auto plain = run_unillm("train " + config(dir, "plain", "stage: sft\nfinetuning_type: full\n") +
                          " --quiet");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  auto dft = run_unillm(
      "train " + config(dir, "dft", "stage: sft\nfinetuning_type: full\nuse_dft_loss: true\n") +
      " --quiet");
  ASSERT_EQ(dft.exit_code, 0) << dft.err;
  const std::vector<double> p = testing::train_losses(dir + "/plain"),
                            d = testing::train_losses(dir + "/dft");
  ASSERT_EQ(d.size(), 8u);
  // Each token costs CE·exp(−CE) <= 1/e, so the DFT loss is below 1/e and below plain CE (same
  // first batch, same weights).
  for (double l : d) {
    EXPECT_TRUE(std::isfinite(l));
    EXPECT_GT(l, 0.0);
    EXPECT_LE(l, std::exp(-1.0));
  }
  EXPECT_LT(d[0], p[0]);
  EXPECT_NE(d.back(), d.front());  // it trains
}

TEST(SftLoss, EaftTrainsWithLoraAndAccumulation) {
  const std::string dir = testing::temp_dir("sft_eaft");
  auto r =
      run_unillm("train " +
                 config(dir, "eaft",
                        "stage: sft\nfinetuning_type: lora\nlora_rank: 4\nuse_eaft_loss: true\n"
                        "eaft_alpha: 0.5\ngradient_accumulation_steps: 2\n") +
                 " --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<double> l = testing::train_losses(dir + "/eaft");
  ASSERT_EQ(l.size(), 8u);
  for (double e : l) EXPECT_TRUE(std::isfinite(e) && e > 0);
  EXPECT_LT(l.back(), l.front());
}

// ASFT against a frozen copy (full) and against the policy with its adapters off (LoRA): at step 1
// the policy is its reference, so KL = 0 and the loss is DFT's; later the KL term adds to it.
TEST(SftLoss, AsftTrainsAgainstItsReference) {
  const std::string dir = testing::temp_dir("sft_asft");
  auto dft = run_unillm(
      "train " + config(dir, "dft", "stage: sft\nfinetuning_type: full\nuse_dft_loss: true\n") +
      " --quiet");
  ASSERT_EQ(dft.exit_code, 0) << dft.err;
  auto full = run_unillm(
      "train " +
      config(dir, "full",
             "stage: sft\nfinetuning_type: full\nuse_asft_loss: true\nasft_alpha: 0.5\n"));
  ASSERT_EQ(full.exit_code, 0) << full.err;
  EXPECT_NE((full.out + full.err).find("reference: a frozen copy"), std::string::npos) << full.err;
  const std::vector<double> d = testing::train_losses(dir + "/dft"),
                            f = testing::train_losses(dir + "/full");
  ASSERT_EQ(f.size(), 8u);
  EXPECT_NEAR(f[0], d[0], 1e-4);  // KL(π0 ‖ π0) = 0
  for (double l : f) EXPECT_TRUE(std::isfinite(l) && l > 0);
  auto lora = run_unillm("train " + config(dir, "lora",
                                           "stage: sft\nfinetuning_type: lora\nlora_rank: 4\n"
                                           "use_asft_loss: true\n"));
  ASSERT_EQ(lora.exit_code, 0) << lora.err;
  // LoRA starts as the base (B = 0): step 1 is the full DFT run's step 1. A DFT-like loss need not
  // fall (CE·e^−CE grows as CE falls towards 1), so "it trains" is: it moves.
  const std::vector<double> l = testing::train_losses(dir + "/lora");
  ASSERT_EQ(l.size(), 8u);
  EXPECT_NEAR(l[0], d[0], 1e-4);
  EXPECT_NE(l.back(), l.front());
}

// ASFT's step loss is LLaMA-Factory's: the sum of its micro-batches' means (asft_loss_func's
// micro-batch mean, which HF's Trainer does not divide by gradient_accumulation_steps). At
// learning rate 0 a run accumulating 1 logs each micro-batch's own mean; one accumulating 2 logs
// the sum of each pair, and its gradient norm is that of the sum.
TEST(SftLoss, AsftSumsItsMicroBatchMeansAsLlamaFactory) {
  const std::string dir = testing::temp_dir("sft_asft_ga");
  const std::string base = testing::kStoriesSft +
                           " finetuning_type=full use_asft_loss=true logging_steps=1 save_strategy=no eval_strategy=no "
                           "max_samples=64 per_device_train_batch_size=1 learning_rate=0 --quiet";
  auto each = testing::train_processes(1, base + " gradient_accumulation_steps=1 max_steps=4 output_dir=" + dir + "/each");
  ASSERT_EQ(each.exit_code, 0) << each.err;
  auto sums = testing::train_processes(1, base + " gradient_accumulation_steps=2 max_steps=2 output_dir=" + dir + "/sums");
  ASSERT_EQ(sums.exit_code, 0) << sums.err;
  const std::vector<double> e = testing::train_losses(dir + "/each"), g = testing::train_losses(dir + "/sums");
  ASSERT_EQ(e.size(), 4u);
  ASSERT_EQ(g.size(), 2u);
  for (size_t i = 0; i < 2; ++i) EXPECT_NEAR(g[i], e[2 * i] + e[2 * i + 1], 2e-4) << "step " << i + 1;
}

TEST(SftLoss, RefusesOtherStagesAndTwoVariants) {
  const std::string dir = testing::temp_dir("sft_loss_refused");
  auto pt =
      run_unillm("train " + config(dir, "pt", "stage: pt\nuse_eaft_loss: true\n") + " --quiet");
  EXPECT_NE(pt.exit_code, 0);
  EXPECT_NE(pt.err.find("use_eaft_loss is an SFT loss"), std::string::npos) << pt.err;
  auto both = run_unillm(
      "train " + config(dir, "both", "stage: sft\nuse_dft_loss: true\nuse_eaft_loss: true\n") +
      " --quiet");
  EXPECT_NE(both.exit_code, 0);
  EXPECT_NE(both.err.find("use_dft_loss and use_eaft_loss"), std::string::npos) << both.err;
  auto asft = run_unillm("train " +
                         config(dir, "asft",
                                "stage: sft\nfinetuning_type: full\nuse_asft_loss: true\n"
                                "ref_mode: precompute\n") +
                         " --quiet");
  EXPECT_NE(asft.exit_code, 0);
  EXPECT_NE(asft.err.find("ref_mode: precompute does not keep"), std::string::npos) << asft.err;
  auto alpha = run_unillm("train " +
                          config(dir, "alpha", "stage: sft\nuse_eaft_loss: true\neaft_alpha: x\n") +
                          " --quiet");
  EXPECT_NE(alpha.exit_code, 0);
  EXPECT_NE(alpha.err.find("eaft_alpha"), std::string::npos) << alpha.err;
}

}  // namespace
}  // namespace unillm
