// train_from_scratch (LLaMA-Factory) and PaddleNLP run_pretrain's continue_training false: the
// model is config.json initialised as `unillm init --seed` does, and no weight file is needed.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "support/expect.h"
#include "support/run_cli.h"
#include "train_log_util.h"

namespace unillm {
namespace {

namespace fs = std::filesystem;
using testing::train_losses;
using testing::run_unillm;
using testing::source_path;

TEST(FromScratch, EqualsInitThenTrainAndNeedsNoWeights) {
  const std::string dir = testing::temp_dir("from_scratch"), cfgonly = dir + "/cfgonly";
  fs::create_directories(cfgonly);
  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"})
    fs::copy_file(source_path("assets/stories260K/") + f, cfgonly + "/" + f);
  auto init = run_unillm("init --config " + cfgonly + "/config.json --out " + dir + "/init --seed 7 --tokenizer " +
                         cfgonly);
  ASSERT_EQ(init.exit_code, 0) << init.err;
  auto yaml = [&](const std::string& model, const std::string& out, const std::string& extra) {
    std::ofstream(dir + "/" + out + ".yaml")
        << "model_name_or_path: " << model << "\nstage: pt\ndo_train: true\nfinetuning_type: full\n"
        << "dataset: tinyshakespeare\ndataset_dir: " << source_path("data") << "\ncutoff_len: 64\n"
        << "output_dir: " << dir << "/" << out << "\nper_device_train_batch_size: 4\nmax_steps: 3\n"
        << "learning_rate: 1.0e-3\nlogging_steps: 1\nsave_strategy: 'no'\nseed: 7\n" << extra;
    return dir + "/" + out + ".yaml";
  };
  auto a = run_unillm("train " + yaml(cfgonly, "scratch", "train_from_scratch: true\n") + " --quiet");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  auto b = run_unillm("train " + yaml(dir + "/init", "from_init", "") + " --quiet");
  ASSERT_EQ(b.exit_code, 0) << b.err;
  const auto la = train_losses(dir + "/scratch"), lb = train_losses(dir + "/from_init");
  ASSERT_EQ(la.size(), 3u);
  EXPECT_EQ(la, lb);                       // the same initial weights, bit for bit
  EXPECT_NEAR(la[0], std::log(512.0), 0.1);  // random init: ~uniform over stories260K's 512 ids

  // Without the key the weight file is required.
  auto c = run_unillm("train " + yaml(cfgonly, "needs_weights", "") + " --quiet");
  EXPECT_NE(c.exit_code, 0);
  EXPECT_NE(c.err.find("model.safetensors"), std::string::npos) << c.err;
}

}  // namespace
}  // namespace unillm
