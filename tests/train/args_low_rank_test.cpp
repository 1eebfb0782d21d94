// The GaLore / APOLLO keys (args_low_rank.cpp): values and defaults as LLaMA-Factory's
// GaloreArguments / ApolloArguments, the optimiser they select, and LLaMA-Factory's refusals.
#include <gtest/gtest.h>

#include "core/error.h"
#include "train/args.h"
#include "train/optimizer.h"

namespace unillm::train {
namespace {

const std::string kBase = "model_name_or_path: m\nstage: pt\nfinetuning_type: full\n";

TrainArgs parse(const std::string& yaml) { return parse_train_args(yaml, "cfg.yaml", {}); }

template <typename E>
std::string error_of(const std::string& yaml) {
  try {
    parse(yaml);
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception type: ") + e.what();
  }
  return "no error";
}

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(LowRankArgs, GaloreKeysAndDefaults) {
  TrainArgs a = parse(kBase + "use_galore: true\n");
  EXPECT_EQ(a.galore.rank, 16);
  EXPECT_EQ(a.galore.update_interval, 200);
  EXPECT_EQ(a.galore.scale, 2.0);
  EXPECT_EQ(a.galore.target, std::vector<std::string>{"all"});
  OptimizerConfig c = optimizer_config(a);
  EXPECT_EQ(c.kind, "galore");
  a = parse(kBase +
            "use_galore: true\ngalore_target: q_proj, v_proj\ngalore_rank: 8\n"
            "galore_update_interval: 50\ngalore_scale: 0.25\ngalore_proj_type: reverse_std\n");
  EXPECT_EQ(a.galore.target, (std::vector<std::string>{"q_proj", "v_proj"}));
  c = optimizer_config(a);
  EXPECT_EQ(c.low_rank.rank, 8);
  EXPECT_EQ(c.low_rank.update_interval, 50);
  EXPECT_EQ(c.low_rank.scale, 0.25);
  EXPECT_EQ(c.low_rank.proj_type, "reverse_std");
  EXPECT_TRUE(has(error_of<ConfigError>(kBase + "use_galore: true\ngalore_proj_type: diagonal\n"),
                  "galore_proj_type"));
  EXPECT_TRUE(has(error_of<ConfigError>(kBase + "galore_rank: 0\n"), "galore_rank"));
}

TEST(LowRankArgs, ApolloKeysAndDefaults) {
  TrainArgs a = parse(kBase + "use_apollo: true\n");
  OptimizerConfig c = optimizer_config(a);
  EXPECT_EQ(c.kind, "apollo");
  EXPECT_EQ(c.low_rank.scale, 32.0);
  EXPECT_EQ(c.low_rank.proj, "random");
  EXPECT_EQ(c.low_rank.scale_type, "channel");
  a = parse(kBase +
            "use_apollo: true\napollo_proj: svd\napollo_scale_type: tensor\n"
            "apollo_scale_front: true\napollo_rank: 4\napollo_proj_type: left\n");
  c = optimizer_config(a);
  EXPECT_EQ(c.low_rank.proj, "svd");
  EXPECT_EQ(c.low_rank.scale_type, "tensor");
  EXPECT_TRUE(c.low_rank.scale_front);
  EXPECT_EQ(c.low_rank.rank, 4);
  EXPECT_EQ(c.low_rank.proj_type, "left");
  // LLaMA-Factory's Literal: APOLLO has no reverse_std / full projection.
  EXPECT_TRUE(has(error_of<ConfigError>(kBase + "apollo_proj_type: full\n"), "apollo_proj_type"));
  EXPECT_TRUE(has(error_of<ConfigError>(kBase + "apollo_scale_type: row\n"), "apollo_scale_type"));
}

TEST(LowRankArgs, LlamaFactoryRefusals) {
  EXPECT_TRUE(
      has(error_of<ConfigError>(
              "model_name_or_path: m\nstage: pt\nfinetuning_type: lora\nuse_galore: true\n"),
          "Cannot use LoRA with GaLore, APOLLO or BAdam together."));
  EXPECT_TRUE(has(error_of<ConfigError>(kBase + "use_galore: true\nuse_apollo: true\n"),
                  "Cannot use GaLore, APOLLO or BAdam together."));
  EXPECT_TRUE(has(error_of<ConfigError>(kBase + "use_apollo: true\napollo_layerwise: true\n"
                                                "gradient_accumulation_steps: 4\n"),
                  "Per-layer APOLLO does not support gradient accumulation"));
  EXPECT_TRUE(has(error_of<ConfigError>(kBase + "use_apollo: true\nuse_muon: true\n"),
                  "choose one optimiser"));
  EXPECT_TRUE(has(error_of<ConfigError>(kBase + "use_galore: true\nuse_badam: true\n"),
                  "Cannot use GaLore, APOLLO or BAdam together."));
  EXPECT_TRUE(
      has(error_of<ConfigError>(kBase + "use_galore: true\noptim: sgd\n"), "Unknown optim: sgd"));
  EXPECT_TRUE(
      has(error_of<ConfigError>(kBase + "use_apollo: true\noptim: adafactor\n"), "Unknown optim"));
  EXPECT_EQ(
      error_of<NotImplemented>(kBase + "use_galore: true\noptim: adamw_8bit\n"),
      "[config] cfg.yaml: use_galore with optim adamw_8bit (galore_torch's GaLoreAdamW8bit) is "
      "not implemented yet; GaLore runs with optim adamw_torch");
}

TEST(LowRankArgs, LayerwiseIgnoresClippingAndSaysSo) {
  const TrainArgs a =
      parse(kBase + "use_galore: true\ngalore_layerwise: true\nmax_grad_norm: 1.0\n");
  EXPECT_EQ(a.max_grad_norm, 0.0);
  int said = 0;
  for (const auto& w : a.warnings)
    said += has(w, "max_grad_norm is ignored") + has(w, "same per-parameter GaLore update");
  EXPECT_EQ(said, 2);
  const TrainArgs plain = parse(kBase + "use_galore: true\n");
  EXPECT_EQ(plain.max_grad_norm, 1.0);
}

}  // namespace
}  // namespace unillm::train
