// `unillm train` with LLaMA-Factory's pure_bf16 and gradient_checkpointing_kwargs: pure_bf16 trains
// exactly as bf16: true does (said at start), use_reentrant is accepted with a note.
#include <gtest/gtest.h>

#include <fstream>

#include "support/expect.h"
#include "support/run_cli.h"
#include "train_log_util.h"

namespace unillm {
namespace {

using testing::run_unillm;
using testing::source_path;

std::string config(const std::string& dir, const std::string& name, const std::string& extra) {
  const std::string path = dir + "/" + name + ".yaml";
  std::ofstream(path) << "model_name_or_path: " << source_path("assets/stories260K") << "\n"
                      << "stage: pt\nfinetuning_type: full\ndo_train: true\n"
                      << "dataset: tinyshakespeare\ndataset_dir: " << source_path("data") << "\n"
                      << "cutoff_len: 64\nmax_samples: 100\noutput_dir: " << dir << "/" << name
                      << "\nper_device_train_batch_size: 4\nlearning_rate: 2.0e-3\nmax_steps: 3\n"
                      << "logging_steps: 1\nsave_strategy: 'no'\nseed: 7\n"
                      << extra;
  return path;
}

TEST(PureBf16, TrainsAsBf16AndSaysSo) {
  const std::string dir = testing::temp_dir("pure_bf16");
  auto pure = run_unillm(
      "train " +
      config(dir, "pure",
             "pure_bf16: true\ngradient_checkpointing_kwargs:\n  use_reentrant: false\n"));
  ASSERT_EQ(pure.exit_code, 0) << pure.err;
  EXPECT_NE(pure.err.find("pure_bf16 trains as bf16: true with f32 trainable weights"),
            std::string::npos)
      << pure.err;
  EXPECT_NE(pure.err.find("use_reentrant has no meaning"), std::string::npos) << pure.err;
  EXPECT_NE(pure.err.find("bf16 mixed precision"), std::string::npos) << pure.err;
  auto bf16 = run_unillm("train " + config(dir, "bf16", "bf16: true\n") + " --quiet");
  ASSERT_EQ(bf16.exit_code, 0) << bf16.err;
  EXPECT_EQ(testing::train_losses(dir + "/pure"), testing::train_losses(dir + "/bf16"));
  EXPECT_EQ(testing::train_losses(dir + "/pure").size(), 3u);
  auto both = run_unillm("train " + config(dir, "both", "pure_bf16: true\nfp16: true\n"));
  EXPECT_NE(both.exit_code, 0);
  EXPECT_NE(both.err.find("pure_bf16 trains in bf16; fp16: true asks for fp16"), std::string::npos)
      << both.err;
}

}  // namespace
}  // namespace unillm
