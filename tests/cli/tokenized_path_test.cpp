// `unillm train` with LLaMA-Factory's tokenized_path (train/tokenized_path.h): the first run
// builds the rows, saves them and trains; a later run trains from the saved rows without reading
// the datasets, with the same losses; what is refused (another stage, template or tokenizer, a
// `datasets` save, a damaged file) is refused by name.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "support/expect.h"
#include "support/run_cli.h"
#include "train_log_util.h"

namespace unillm {
namespace {

namespace fs = std::filesystem;
using testing::run_unillm;
using testing::source_path;

// SFT on the bundled model, neat packing (rows with positions and segment ids) and a val_size
// split (the eval rows are saved too).
std::string sft_config(const std::string& dir, const std::string& name, const std::string& extra) {
  const std::string path = dir + "/" + name + ".yaml";
  std::ofstream(path) << "model_name_or_path: " << source_path("assets/stories260K") << "\n"
                      << "stage: sft\nfinetuning_type: full\ndo_train: true\n"
                      << "dataset: alpaca_en_demo\ndataset_dir: " << source_path("data") << "\n"
                      << "template: alpaca\ncutoff_len: 96\nmax_samples: 40\nneat_packing: true\n"
                      << "val_size: 0.25\ndo_eval: true\neval_strategy: steps\neval_steps: 2\n"
                      << "output_dir: " << dir << "/" << name << "\n"
                      << "per_device_train_batch_size: 2\nlearning_rate: 2.0e-3\n"
                      << "max_steps: 4\nlogging_steps: 1\nsave_strategy: 'no'\nseed: 5\n"
                      << "tokenized_path: " << dir << "/rows\n"
                      << extra;
  return path;
}

std::vector<double> eval_losses(const std::string& out) {
  std::vector<double> l;
  for (auto& line : testing::log_lines(out))
    if (line.contains("eval_loss")) l.push_back(line["eval_loss"].get<double>());
  return l;
}

TEST(TokenizedPath, SavesThenTrainsFromTheSavedRowsWithTheSameLosses) {
  const std::string dir = testing::temp_dir("tokenized_sft");
  auto a = run_unillm("train " + sft_config(dir, "a", ""));
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_NE(a.err.find("Tokenized dataset is saved at " + dir + "/rows."), std::string::npos)
      << a.err;
  for (const char* f : {"unillm_tokenized.json", "train.rows", "eval.rows"})
    EXPECT_TRUE(fs::exists(dir + "/rows/" + f)) << f;
  // Without tokenized_path the same run: saving changes nothing.
  auto plain = run_unillm("train " + sft_config(dir, "plain", "") + " tokenized_path=null --quiet");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  // From the saved rows; the dataset named here does not exist and is not read.
  auto b = run_unillm("train " + sft_config(dir, "b", "") + " dataset=no_such_dataset");
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_NE(b.err.find("Loaded tokenized dataset from " + dir + "/rows."), std::string::npos)
      << b.err;
  EXPECT_NE(b.err.find("ignore other data arguments"), std::string::npos) << b.err;
  EXPECT_NE(b.err.find("dataset alpaca_en_demo (this config: no_such_dataset)"), std::string::npos)
      << b.err;
  const auto losses = testing::train_losses(dir + "/a");
  ASSERT_EQ(losses.size(), 4u);
  EXPECT_EQ(testing::train_losses(dir + "/plain"), losses);
  EXPECT_EQ(testing::train_losses(dir + "/b"), losses);
  ASSERT_EQ(eval_losses(dir + "/a").size(), 2u);
  EXPECT_EQ(eval_losses(dir + "/b"), eval_losses(dir + "/a"));
}

TEST(TokenizedPath, RefusesAnotherStageTemplateOrTokenizer) {
  const std::string dir = testing::temp_dir("tokenized_refuse");
  ASSERT_EQ(run_unillm("train " + sft_config(dir, "a", "") + " max_steps=1 --quiet").exit_code, 0);
  const std::string cfg = sft_config(dir, "b", "");
  auto stage = run_unillm("train " + cfg +
                          " stage=pt neat_packing=false val_size=0 do_eval=false "
                          "eval_strategy=no");
  EXPECT_NE(stage.exit_code, 0);
  EXPECT_NE(stage.err.find("holds rows built with stage 'sft'; this run has stage 'pt'"),
            std::string::npos)
      << stage.err;
  auto tmpl = run_unillm("train " + cfg + " template=default");
  EXPECT_NE(tmpl.exit_code, 0);
  EXPECT_NE(tmpl.err.find("template 'alpaca'; this run has template 'default'"), std::string::npos)
      << tmpl.err;
  auto tok = run_unillm("train " + cfg + " add_special_tokens='<|new|>'");
  EXPECT_NE(tok.exit_code, 0);
  EXPECT_NE(tok.err.find("holds rows built with tokenizer (512 ids"), std::string::npos) << tok.err;
}

TEST(TokenizedPath, RefusesADatasetsSaveAndDamagedFilesByName) {
  const std::string dir = testing::temp_dir("tokenized_bad");
  fs::create_directories(dir + "/rows/train");
  std::ofstream(dir + "/rows/dataset_dict.json") << "{\"splits\": [\"train\"]}\n";
  auto arrow = run_unillm("train " + sft_config(dir, "a", ""));
  EXPECT_NE(arrow.exit_code, 0);
  EXPECT_NE(arrow.err.find("a Hugging Face `datasets` save (dataset_dict.json)"), std::string::npos)
      << arrow.err;
  fs::remove_all(dir + "/rows");
  ASSERT_EQ(run_unillm("train " + sft_config(dir, "a", "") + " max_steps=1 --quiet").exit_code, 0);
  const std::string rows = dir + "/rows/train.rows";
  fs::resize_file(rows, fs::file_size(rows) - 5);  // truncated
  auto cut = run_unillm("train " + sft_config(dir, "b", ""));
  EXPECT_NE(cut.exit_code, 0);
  EXPECT_NE(cut.err.find(rows + ": checksum mismatch (a corrupted or truncated tokenized file)"),
            std::string::npos)
      << cut.err;
  fs::remove(dir + "/rows/unillm_tokenized.json");  // an unfinished save
  auto half = run_unillm("train " + sft_config(dir, "b", ""));
  EXPECT_NE(half.exit_code, 0);
  EXPECT_NE(half.err.find("no unillm_tokenized.json"), std::string::npos) << half.err;
}

// Stage pt: the label mask of pad = eos travels in the manifest.
TEST(TokenizedPath, PretrainingRoundTrip) {
  const std::string dir = testing::temp_dir("tokenized_pt");
  auto cfg = [&](const std::string& name) {
    const std::string path = dir + "/" + name + ".yaml";
    std::ofstream(path) << "model_name_or_path: " << source_path("assets/stories260K") << "\n"
                        << "stage: pt\nfinetuning_type: full\ndo_train: true\n"
                        << "dataset: tinyshakespeare\ndataset_dir: " << source_path("data") << "\n"
                        << "cutoff_len: 64\nmax_samples: 200\noutput_dir: " << dir << "/" << name
                        << "\nper_device_train_batch_size: 4\nlearning_rate: 2.0e-3\nmax_steps: 3\n"
                        << "logging_steps: 1\nsave_strategy: 'no'\nseed: 7\ntokenized_path: " << dir
                        << "/rows\n";
    return path;
  };
  ASSERT_EQ(run_unillm("train " + cfg("a") + " --quiet").exit_code, 0);
  auto b = run_unillm("train " + cfg("b") + " --quiet");
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_EQ(testing::train_losses(dir + "/b"), testing::train_losses(dir + "/a"));
  EXPECT_EQ(testing::train_losses(dir + "/a").size(), 3u);
}

// DPO (pairs: group 2) with precomputed reference log-probs, whose table the stage sizes from the
// rows it adopts: the saved pairs train with the same losses and metrics.
TEST(TokenizedPath, DpoPairsRoundTrip) {
  const std::string dir = testing::temp_dir("tokenized_dpo");
  const std::string args =
      " cutoff_len=96 max_samples=12 val_size=0.25 per_device_train_batch_size=2"
      " learning_rate=5.0e-3 max_steps=3 logging_steps=1 save_strategy=no"
      " ref_mode=precompute tokenized_path=" +
      dir + "/rows --quiet";
  const std::string example = "train examples/train_lora/stories260K_lora_dpo.yaml output_dir=";
  auto a = testing::run_unillm_in(source_path(""), example + dir + "/a" + args);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  auto b = testing::run_unillm_in(source_path(""),
                                  example + dir + "/b" + args + " dataset=no_such_pairs");
  ASSERT_EQ(b.exit_code, 0) << b.err;
  auto la = testing::train_lines(dir + "/a"), lb = testing::train_lines(dir + "/b");
  ASSERT_EQ(la.size(), 3u);
  for (auto* lines : {&la, &lb})
    for (auto& l : *lines)
      for (const char* k : {"tokens_per_s", "elapsed_time", "remaining_time"}) l.erase(k);
  EXPECT_EQ(la, lb);
}

}  // namespace
}  // namespace unillm
