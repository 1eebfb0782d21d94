// use_muon and use_adam_mini as the config reads them (src/train/args_muon_adam_mini.cpp): the
// optimiser they choose and the combinations refused.
#include <gtest/gtest.h>

#include "core/error.h"
#include "train/args.h"
#include "train/optimizer.h"

namespace unillm::train {
namespace {

const std::string kBase = "model_name_or_path: m\nstage: sft\nfinetuning_type: full\n";

TrainArgs parse(const std::string& yaml) { return parse_train_args(yaml, "cfg.yaml", {}); }

std::string error_of(const std::string& yaml) {
  try {
    parse(yaml);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(MuonAdamMiniArgs, ChooseTheOptimiser) {
  EXPECT_EQ(optimizer_config(parse(kBase + "use_muon: true\n")).kind, "muon");
  EXPECT_EQ(optimizer_config(parse(kBase + "use_adam_mini: true\n")).kind, "adam_mini");
  EXPECT_EQ(optimizer_config(parse(kBase + "use_muon: false\n")).kind, "adamw");
  // LoRA is allowed, as in LLaMA-Factory; so is optim naming AdamW.
  EXPECT_EQ(
      optimizer_config(parse("model_name_or_path: m\nuse_muon: true\noptim: adamw_torch_fused\n"))
          .kind,
      "muon");
}

TEST(MuonAdamMiniArgs, RefusesWhatLlamaFactoryWouldDropSilently) {
  EXPECT_TRUE(has(error_of(kBase + "use_muon: true\nuse_adam_mini: true\n"),
                  "use_muon with use_adam_mini: give one optimiser"));
  EXPECT_TRUE(has(error_of(kBase + "use_muon: true\noptim: sgd\n"),
                  "use_muon replaces the optimiser: optim must stay adamw_torch or "
                  "adamw_torch_fused (not sgd"));
  EXPECT_TRUE(has(error_of(kBase + "use_adam_mini: true\nadafactor: true\n"), "(not adafactor"));
  EXPECT_TRUE(has(error_of("model_name_or_path: m\nuse_adam_mini: true\nloraplus_lr_ratio: 16\n"),
                  "use_adam_mini with loraplus_lr_ratio"));
  EXPECT_TRUE(
      has(error_of(kBase + "use_muon: true\nuse_badam: true\n"), "use_muon with use_badam"));
  EXPECT_TRUE(has(error_of(kBase + "use_muon: 3\n"), "use_muon"));
}

}  // namespace
}  // namespace unillm::train
