// The SFT loss keys (use_dft_loss, use_eaft_loss, eaft_alpha, use_asft_loss, asft_alpha):
// LLaMA-Factory's defaults, and the refusals of what it would silently ignore, each naming the
// file.
#include <gtest/gtest.h>

#include "core/error.h"
#include "train/args.h"

namespace unillm::train {
namespace {

const std::string kBase = "model_name_or_path: m\nfinetuning_type: lora\n";

TrainArgs parse(const std::string& yaml) { return parse_train_args(yaml, "cfg.yaml", {}); }

std::string config_error(const std::string& yaml) {
  try {
    parse(yaml);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

TEST(LossArgs, DefaultsAndValues) {
  const TrainArgs d = parse(kBase + "stage: sft\n");
  EXPECT_FALSE(d.use_dft_loss || d.use_eaft_loss || d.use_asft_loss);
  EXPECT_EQ(d.eaft_alpha, 1.0);  // LLaMA-Factory's defaults
  EXPECT_EQ(d.asft_alpha, 0.1);
  const TrainArgs e =
      parse(kBase + "use_eaft_loss: true\neaft_alpha: 0.25\n");  // stage sft by default
  EXPECT_TRUE(e.use_eaft_loss);
  EXPECT_EQ(e.eaft_alpha, 0.25);
  const TrainArgs a = parse(kBase + "use_asft_loss: true\nasft_alpha: 0.05\n");
  EXPECT_TRUE(a.use_asft_loss);
  EXPECT_EQ(a.asft_alpha, 0.05);
  EXPECT_TRUE(parse(kBase + "use_dft_loss: true\n").use_dft_loss);
}

TEST(LossArgs, RefusesWhatLlamaFactoryIgnores) {
  const std::string two = config_error(kBase + "use_dft_loss: true\nuse_asft_loss: true\n");
  EXPECT_NE(two.find("cfg.yaml"), std::string::npos) << two;
  EXPECT_NE(two.find("use_dft_loss and use_asft_loss are alternative SFT losses"),
            std::string::npos)
      << two;
  const std::string rm = config_error(kBase + "stage: rm\nuse_dft_loss: true\n");
  EXPECT_NE(rm.find("use_dft_loss is an SFT loss"), std::string::npos) << rm;
  const std::string pre = config_error(kBase + "use_asft_loss: true\nref_mode: precompute\n");
  EXPECT_NE(pre.find("ref_mode: precompute"), std::string::npos) << pre;
  const std::string alpha = config_error(kBase + "use_eaft_loss: true\neaft_alpha: .inf\n");
  EXPECT_NE(alpha.find("eaft_alpha"), std::string::npos) << alpha;
  EXPECT_NE(config_error(kBase + "use_asft_loss: maybe\n").find("use_asft_loss"),
            std::string::npos);
}

}  // namespace
}  // namespace unillm::train
