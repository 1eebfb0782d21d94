// The vocabulary keys as LLaMA-Factory's ModelArguments parses them: comma lists stripped,
// new_special_tokens_config's keys winning over add_special_tokens, init_special_tokens' choices,
// additional_target; and their errors.
#include <gtest/gtest.h>

#include <fstream>

#include "core/error.h"
#include "support/run_cli.h"
#include "train/args.h"
#include "train/vocab.h"

namespace unillm::train {
namespace {

const std::string kBase = "model_name_or_path: m\nstage: sft\nfinetuning_type: lora\n";

TrainArgs parse(const std::string& yaml) { return parse_train_args(yaml, "cfg.yaml", {}); }

template <class E>
std::string error_of(const std::string& yaml) {
  try {
    parse(yaml);
  } catch (const E& e) {
    return e.what();
  }
  return "no error";
}

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
  EXPECT_NE(error_of<NotImplemented>(kBase + "init_special_tokens: desc_init\n")
                .find("description-based"),
            std::string::npos);
  EXPECT_NE(
      error_of<ConfigError>(kBase + "init_special_tokens: mean\n").find("init_special_tokens"),
      std::string::npos);
  EXPECT_NE(error_of<ConfigError>(kBase + "add_tokens: 'a,,b'\n").find("add_tokens"),
            std::string::npos);
  EXPECT_EQ(parse(kBase + "init_special_tokens: noise_init\n").init_special_tokens, "noise_init");
}

}  // namespace
}  // namespace unillm::train
