// use_badam, badam_* and use_llama_pro as the config reads them (src/train/args_badam.cpp): the
// optimiser settings they give and the values and combinations refused.
#include <gtest/gtest.h>

#include "core/error.h"
#include "args_test_util.h"
#include "train/args.h"
#include "train/optimizer.h"

namespace unillm::train {
namespace {

const std::string kBase =
    "model_name_or_path: m\nstage: sft\nfinetuning_type: full\nuse_badam: true\n";

using testing_args::error_of;
using testing_args::parse;

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(BAdamArgs, GiveTheOptimiserSettings) {
  const OptimizerConfig d = optimizer_config(parse(kBase));
  EXPECT_EQ(d.kind, "badam");
  EXPECT_EQ(d.badam.switch_mode, "ascending");  // LLaMA-Factory's defaults
  EXPECT_EQ(d.badam.switch_interval, 50);
  EXPECT_EQ(d.badam.start_block, -1);
  const OptimizerConfig c = optimizer_config(
      parse(kBase + "badam_switch_mode: fixed\nbadam_start_block: 3\nbadam_switch_interval: -1\n"
                    "badam_verbose: 2\nseed: 9\nbadam_mode: layer\n"));
  EXPECT_EQ(c.badam.switch_mode, "fixed");
  EXPECT_EQ(c.badam.start_block, 3);
  EXPECT_EQ(c.badam.switch_interval, -1);
  EXPECT_EQ(c.badam.verbose, 2);
  EXPECT_EQ(c.badam.seed, 9u);
  EXPECT_EQ(optimizer_config(parse("model_name_or_path: m\nfinetuning_type: full\n")).kind,
            "adamw");
  // The weight decay LLaMA-Factory's BAdam really applies is said.
  bool said = false;
  for (const auto& w : parse(kBase).warnings) said = said || has(w, "weight_decay 0.01");
  EXPECT_TRUE(said);
}

TEST(BAdamArgs, RatioModeGivesItsSettings) {
  const TrainArgs a = parse(kBase +
                            "badam_mode: ratio\nbadam_update_ratio: 0.1\nbadam_mask_mode: "
                            "scatter\nbadam_switch_mode: fixed\nseed: 5\n"
                            "gradient_accumulation_steps: 4\n");
  const OptimizerConfig c = optimizer_config(a);
  EXPECT_EQ(c.kind, "badam_ratio");
  EXPECT_EQ(c.badam.update_ratio, 0.1);
  EXPECT_EQ(c.badam.mask_mode, "scatter");
  EXPECT_EQ(c.badam.ratio_switch_every, 100);  // LLaMA-Factory passes no interval
  EXPECT_EQ(c.badam.seed, 5u);
  EXPECT_EQ(c.badam.backward_passes, 4);  // the package's hook runs once per pass
  bool said = false;  // no weight decay, and the fixed 100-step interval, are said
  for (const auto& w : a.warnings) said = said || has(w, "no weight decay");
  EXPECT_TRUE(said);
  EXPECT_EQ(optimizer_config(parse(kBase + "badam_mode: ratio\n")).badam.update_ratio, 0.05);
}

TEST(BAdamArgs, RefusesBadValuesAndCombinations) {
  EXPECT_TRUE(has(error_of(kBase + "badam_switch_interval: 0\n"), "badam_switch_interval"));
  EXPECT_TRUE(has(error_of(kBase + "badam_switch_interval: -2\n"), "badam_switch_interval"));
  EXPECT_TRUE(has(error_of(kBase + "badam_verbose: 3\n"), "0, 1 or 2"));
  EXPECT_TRUE(has(error_of(kBase + "badam_switch_mode: sideways\n"), "sideways"));
  EXPECT_TRUE(has(error_of(kBase + "badam_start_block: -1\n"), "badam_start_block"));
  EXPECT_TRUE(has(error_of(kBase + "badam_mode: ratio\nbadam_update_ratio: 0\n"),
                  "badam_update_ratio"));
  EXPECT_TRUE(has(error_of(kBase + "badam_mode: ratio\nbadam_update_ratio: 1.5\n"), "(1e-06, 1]"));
  EXPECT_TRUE(has(error_of(kBase + "badam_mode: ratio\nbadam_mask_mode: random\n"), "random"));
  EXPECT_TRUE(has(error_of(kBase + "badam_switch_mode: fixed\n"), "needs badam_start_block"));
  EXPECT_TRUE(has(error_of(kBase + "optim: adafactor\n"), "(not adafactor)"));
  EXPECT_TRUE(has(error_of("model_name_or_path: m\nfinetuning_type: lora\nuse_badam: true\n"),
                  "Cannot use LoRA with GaLore, APOLLO or BAdam together."));
  EXPECT_TRUE(has(error_of("model_name_or_path: m\nfinetuning_type: freeze\nuse_badam: true\n"),
                  "needs finetuning_type: full"));
}

TEST(LlamaProArgs, FreezeOrLora) {
  const std::string freeze =
      "model_name_or_path: m\nfinetuning_type: freeze\nuse_llama_pro: true\n";
  EXPECT_TRUE(parse(freeze + "freeze_trainable_layers: 8\n").use_llama_pro);
  EXPECT_TRUE(has(error_of("model_name_or_path: m\nfinetuning_type: full\nuse_llama_pro: true\n"),
                  "`use_llama_pro` is only valid for Freeze or LoRA training."));
  // With LoRA (or OFT) the adapter goes on the expanded layers (finetune.cpp).
  EXPECT_TRUE(parse("model_name_or_path: m\nfinetuning_type: lora\nuse_llama_pro: true\n"
                    "freeze_trainable_layers: 4\n")
                  .use_llama_pro);
  EXPECT_TRUE(has(error_of("model_name_or_path: m\nfinetuning_type: lora\nuse_llama_pro: true\n"
                           "freeze_trainable_layers: 0\n"),
                  "freeze_trainable_layers > 0"));
  EXPECT_TRUE(
      has(error_of(freeze + "freeze_trainable_layers: -2\n"), "freeze_trainable_layers > 0"));
}

}  // namespace
}  // namespace unillm::train
