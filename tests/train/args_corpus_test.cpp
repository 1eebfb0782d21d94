// The token-corpus keys input_dir / split in both dialects: parsing, defaults, the data layer's
// view, and the cross-key errors naming the key.
#include <gtest/gtest.h>

#include "core/error.h"
#include "train/args.h"

namespace unillm::train {
namespace {

const std::string kBase =
    "model_name_or_path: m\nstage: pt\nfinetuning_type: full\ndo_train: true\n";

template <typename E = ConfigError>
std::string yaml_error(const std::string& yaml, const std::vector<std::string>& ov = {}) {
  try {
    parse_train_args(yaml, "cfg.yaml", ov);
  } catch (const E& e) {
    return e.what();
  }
  return "no error";
}

TEST(TrainArgsCorpus, YamlKeysReachTheDataLayer) {
  TrainArgs a = parse_train_args(kBase + "input_dir: corpora/c4\n", "cfg.yaml");
  EXPECT_EQ(a.split, "949,50,1");  // PaddleNLP's default
  EXPECT_TRUE(a.packing);
  data::DataOptions o = data_options(a);
  EXPECT_EQ(o.input_dir, "corpora/c4");
  EXPECT_EQ(o.split, "949,50,1");
  EXPECT_EQ(parse_train_args(kBase + "input_dir: c\nsplit: [98, 2]\n", "cfg.yaml").split, "98,2");
  EXPECT_EQ(parse_train_args(kBase + "input_dir: c\nsplit: 1,0,0\n", "cfg.yaml").split, "1,0,0");
  // Evaluation takes the valid part of split.
  EXPECT_TRUE(parse_train_args(kBase + "input_dir: c\neval_strategy: steps\n", "cfg.yaml").do_eval);
}

TEST(TrainArgsCorpus, BadValuesAndCombinationsNameTheKey) {
  const std::string c = kBase + "input_dir: c\n";
  EXPECT_NE(yaml_error(c + "split: 1,x\n").find("cfg.yaml line 6: key 'split'"), std::string::npos)
      << yaml_error(c + "split: 1,x\n");
  EXPECT_NE(yaml_error(c, {"split=0,0,0"}).find("key 'split'"), std::string::npos);
  EXPECT_NE(yaml_error(c + "dataset: a\n").find("input_dir cannot be used with dataset"),
            std::string::npos);
  EXPECT_NE(yaml_error(c + "val_size: 0.1\n").find("input_dir cannot be used with val_size"),
            std::string::npos);
  EXPECT_NE(yaml_error(c + "max_samples: 10\n").find("max_samples"), std::string::npos);
  EXPECT_NE(yaml_error(c, {"stage=sft"}).find("needs stage: pt"), std::string::npos);
  EXPECT_NE(yaml_error(c + "split: 1,0,0\neval_strategy: steps\n").find("valid weight in split"),
            std::string::npos);
}

TEST(TrainArgsCorpus, PaddleRunPretrainArguments) {
  TrainArgs a = parse_paddle_args(R"({"model_name_or_path": "m", "input_dir": "./data",
      "split": "949,50,1", "max_seq_length": 512, "data_impl": "mmap", "do_train": true})",
                                  "pre.json");
  EXPECT_EQ(a.stage, "pt");  // input_dir selects run_pretrain.py's semantics
  EXPECT_EQ(a.input_dir, "./data");
  EXPECT_EQ(a.cutoff_len, 512);
  EXPECT_EQ(a.data_cutoff_len(), 512);
  EXPECT_EQ(a.finetuning_type, "full");
  ASSERT_EQ(a.warnings.size(), 1u);
  EXPECT_NE(a.warnings[0].find("data_impl"), std::string::npos);
  // run_pretrain.py's continue_training defaults to false: a random initialisation of the config.
  EXPECT_TRUE(a.train_from_scratch);
  const std::string base = R"({"model_name_or_path": "m", "input_dir": "d", "continue_training": )";
  EXPECT_FALSE(parse_paddle_args(base + "true}", "pre.json").train_from_scratch);
  EXPECT_TRUE(parse_paddle_args(base + "0}", "pre.json").train_from_scratch);
  // run_finetune.py always starts from the weights: the key is ignored there (warned).
  TrainArgs ft = parse_paddle_args(
      R"({"model_name_or_path": "m", "dataset_name_or_path": "d", "continue_training": false})", "ft.json");
  EXPECT_FALSE(ft.train_from_scratch);
  int mentions = 0;
  for (const auto& w : ft.warnings) mentions += w.find("'continue_training'") != std::string::npos;
  EXPECT_EQ(mentions, 1);
  EXPECT_TRUE(parse_train_args("model_name_or_path: m\nstage: pt\ndataset: a\ntrain_from_scratch: true\n",
                               "c.yaml")
                  .train_from_scratch);
  try {
    parse_paddle_args(R"({"model_name_or_path": "m", "input_dir": "d", "split": "a"})", "pre.json");
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("key 'split'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace unillm::train
