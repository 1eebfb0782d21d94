// The vocabulary keys as LLaMA-Factory's ModelArguments parses them: comma lists stripped,
// new_special_tokens_config's keys winning over add_special_tokens, init_special_tokens' choices,
// additional_target; and their errors.
#include <gtest/gtest.h>

#include <fstream>

#include "core/error.h"
#include "support/run_cli.h"
#include "train/args.h"
#include "args_test_util.h"
#include "train/vocab.h"

namespace unillm::train {
namespace {

const std::string kBase = "model_name_or_path: m\nstage: sft\nfinetuning_type: lora\n";

using testing_args::error_of;
using testing_args::parse;

TEST(VocabArgs, ListsAndDefaults) {
  TrainArgs d = parse(kBase);
  EXPECT_FALSE(d.resize_vocab);
  EXPECT_FALSE(wants_resize(d));
  EXPECT_TRUE(modules_to_save(d).empty());
  TrainArgs a = parse(kBase + "add_tokens: 'a , b'\nadd_special_tokens: <|x|>,<|y|>\n");
  EXPECT_EQ(a.add_tokens, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(a.add_special_tokens, (std::vector<std::string>{"<|x|>", "<|y|>"}));
  EXPECT_TRUE(wants_resize(a));  // LLaMA-Factory turns resize_vocab on
  EXPECT_EQ(modules_to_save(a), (std::vector<std::string>{"embed_tokens", "lm_head"}));
  TrainArgs t = parse(kBase + "resize_vocab: true\nadditional_target: norm, lm_head\n");
  EXPECT_EQ(modules_to_save(t), (std::vector<std::string>{"norm", "lm_head"}));
}

TEST(VocabArgs, NewSpecialTokensConfigWins) {
  const std::string path = testing::temp_dir("vocab_args") + "/tokens.yaml";
  std::ofstream(path) << "'<|svg|>': start of an SVG\n'<|/svg|>': end of an SVG\n";
  TrainArgs a =
      parse(kBase + "add_special_tokens: <|x|>\nnew_special_tokens_config: " + path + "\n");
  EXPECT_EQ(a.add_special_tokens, (std::vector<std::string>{"<|svg|>", "<|/svg|>"}));
  TrainArgs b =
      parse(kBase + "new_special_tokens_config: " + path + "\nadd_special_tokens: <|x|>\n");
  EXPECT_EQ(b.add_special_tokens, (std::vector<std::string>{"<|svg|>", "<|/svg|>"}));
  std::ofstream(path) << "- a list\n";
  EXPECT_NE(error_of<ConfigError>(kBase + "new_special_tokens_config: " + path + "\n")
                .find("must be a YAML mapping {token: description}"),
            std::string::npos);
  EXPECT_NE(error_of<ConfigError>(kBase + "new_special_tokens_config: /nonexistent.yaml\n")
                .find("cannot be read"),
            std::string::npos);
}

TEST(VocabArgs, Errors) {
  EXPECT_NE(
      error_of<ConfigError>(kBase + "init_special_tokens: mean\n").find("init_special_tokens"),
      std::string::npos);
  EXPECT_NE(error_of<ConfigError>(kBase + "add_tokens: 'a,,b'\n").find("add_tokens"),
            std::string::npos);
  EXPECT_EQ(parse(kBase + "init_special_tokens: noise_init\n").init_special_tokens, "noise_init");
}

// LLaMA-Factory's vendored multi_tokens example: 16 tokens with their descriptions, in file order.
TEST(VocabArgs, DescInitReadsTheDescriptions) {
  const std::string path =
      std::string(UNILLM_SOURCE_DIR) + "/tests/data/llamafactory_examples/extras/multi_tokens/tokens_cfg.yaml";
  TrainArgs a = parse(kBase + "new_special_tokens_config: " + path + "\ninit_special_tokens: desc_init\n");
  EXPECT_EQ(a.init_special_tokens, "desc_init");
  ASSERT_EQ(a.special_token_descriptions.size(), 16u);
  EXPECT_EQ(a.special_token_descriptions[0],
            (std::pair<std::string, std::string>{"<|START_OF_SVG|>", "Marks the beginning of an SVG document"}));
  EXPECT_EQ(a.special_token_descriptions[15].first, "<|end_of_style|>");
  ASSERT_EQ(a.add_special_tokens.size(), 16u);
  EXPECT_EQ(a.add_special_tokens[1], "<|END_OF_SVG|>");
  EXPECT_EQ(parse(kBase + "init_special_tokens: desc_init_w_noise\nnew_special_tokens_config: " + path + "\n")
                .init_special_tokens,
            "desc_init_w_noise");
  // Without descriptions LLaMA-Factory falls back to noise_init with a warning.
  TrainArgs n = parse(kBase + "init_special_tokens: desc_init\nadd_special_tokens: <|x|>\n");
  EXPECT_EQ(n.init_special_tokens, "noise_init");
  bool warned = false;
  for (const auto& w : n.warnings) warned |= w.find("needs new_special_tokens_config") != std::string::npos;
  EXPECT_TRUE(warned);
  const std::string bad = testing::temp_dir("vocab_args") + "/bad.yaml";
  std::ofstream(bad) << "'<|a|>': text\n'<|b|>': [not, text]\n";
  EXPECT_NE(error_of<ConfigError>(kBase + "new_special_tokens_config: " + bad + "\n")
                .find("bad.yaml line 2: the description of token '<|b|>' must be text"),
            std::string::npos);
}

}  // namespace
}  // namespace unillm::train
