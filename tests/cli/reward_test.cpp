// Stage rm end to end on the bundled model: a preference a tiny model can learn (hand-made pairs:
// happy endings chosen over sad ones) reaches held-out accuracy 1 within a few steps, the output
// carries value_head.safetensors with TRL's keys beside the adapter, `unillm eval reward` agrees,
// and a kill -9 resumes exactly (the head's weights, moments and dropout draws included).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "io/safetensors.h"
#include "support/expect.h"
#include "support/run_cli.h"
#include "train_log_util.h"

namespace unillm {
namespace {

namespace fs = std::filesystem;
using testing::log_lines;
using testing::run_unillm;
using testing::slurp;
using testing::source_path;

// 48 alpaca pairs in dir/data (dataset "pairs"); the config trains a LoRA reward model on them.
std::string write_rm_config(const std::string& dir, const std::string& out) {
  fs::create_directories(dir + "/data");
  const char* names[] = {"Tom", "Lily", "Sam", "Mia", "Ben", "Anna", "Max", "Sue"};
  const char* things[] = {"ball", "dog", "cake", "tree", "boat", "kite", "hat", "cat"};
  std::ofstream d(dir + "/data/pairs.jsonl");
  for (int i = 0; i < 48; ++i) {
    const std::string n = names[(i * 5) % 8], t = things[(i * 3 + i / 8) % 8];
    d << R"({"instruction": "Tell me about )" << n << " and the " << t << R"(.", "chosen": ")" << n
      << " played with the " << t << R"( and was very happy.", "rejected": ")" << n << " lost the " << t
      << R"( and was very sad."})" << "\n";
  }
  std::ofstream(dir + "/data/dataset_info.json")
      << R"({"pairs": {"file_name": "pairs.jsonl", "ranking": true, "columns": {"prompt": "instruction", )"
      << R"("chosen": "chosen", "rejected": "rejected"}}})";
  const std::string cfg = dir + "/rm.yaml";
  std::ofstream(cfg) << "model_name_or_path: " << source_path("assets/stories260K") << "\n"
                     << "stage: rm\ndo_train: true\nfinetuning_type: lora\nlora_target: all\n"
                     << "dataset: pairs\ndataset_dir: " << dir << "/data\ntemplate: alpaca\ncutoff_len: 64\n"
                     << "val_size: 0.25\noutput_dir: " << out << "\noverwrite_output_dir: true\n"
                     << "per_device_train_batch_size: 4\nlearning_rate: 5.0e-3\nmax_steps: 16\n"
                     << "logging_steps: 1\nsave_steps: 8\neval_strategy: steps\neval_steps: 8\n"
                     << "per_device_eval_batch_size: 8\nplot_loss: true\n";
  return cfg;
}

TEST(Rm, LearnsAHeldOutPreferenceAndEvalRewardAgrees) {
  const std::string dir = testing::temp_dir("rm");
  const std::string cfg = write_rm_config(dir, dir + "/a");
  auto a = run_unillm("train " + cfg + " --quiet");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  double last_accuracy = -1;
  for (auto& j : log_lines(dir + "/a"))
    if (j.contains("eval_accuracy")) last_accuracy = j["eval_accuracy"].get<double>();
  EXPECT_GE(last_accuracy, 0.9);  // 12 held-out pairs
  for (const char* f : {"adapter_model.safetensors", "value_head.safetensors", "training_eval_accuracy.png",
                        "checkpoint-8/value_head.safetensors"})
    EXPECT_TRUE(fs::exists(dir + "/a/" + f)) << f;
  const auto head = io::SafetensorsFile::open(dir + "/a/value_head.safetensors");
  ASSERT_EQ(head->tensors().size(), 2u);
  EXPECT_EQ(head->info("v_head.summary.weight").shape, (Shape{1, 64}));
  EXPECT_EQ(head->info("v_head.summary.bias").shape, (Shape{1}));
  auto ev = run_unillm("eval reward --model " + source_path("assets/stories260K") + " --adapter " + dir +
                       "/a --file " + dir + "/data/pairs.jsonl --template alpaca --json");
  ASSERT_EQ(ev.exit_code, 0) << ev.err;
  const auto r = nlohmann::json::parse(ev.out);
  EXPECT_GE(r["accuracy"].get<double>(), 0.9);
  EXPECT_GT(r["mean_margin"].get<double>(), 0.0);
  EXPECT_EQ(r["pairs"].get<int64_t>(), 48);
  // kill -9 after step 8, resume: the same run.
  const std::string cfg_b = write_rm_config(dir, dir + "/b");
  auto killed = run_unillm("train " + cfg_b + " --quiet --kill-after-step 8");
  EXPECT_EQ(killed.exit_code, 128 + 9) << killed.err;
  auto resumed = run_unillm("train " + cfg_b + " resume_from_checkpoint=true --quiet");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  const auto la = log_lines(dir + "/a"), lb = log_lines(dir + "/b");
  ASSERT_EQ(la.size(), lb.size());
  for (size_t i = 0; i < la.size(); ++i)
    if (la[i].contains("loss")) {
      EXPECT_EQ(la[i]["grad_norm"], lb[i]["grad_norm"]) << "line " << i;
    }
  EXPECT_EQ(slurp(dir + "/a/value_head.safetensors"), slurp(dir + "/b/value_head.safetensors"));
  EXPECT_EQ(slurp(dir + "/a/adapter_model.safetensors"), slurp(dir + "/b/adapter_model.safetensors"));
}

TEST(Rm, EvalRewardNeedsAValueHead) {
  const std::string dir = testing::temp_dir("rm_bad");
  write_rm_config(dir, dir + "/a");
  auto r = run_unillm("eval reward --model " + source_path("assets/stories260K") + " --file " + dir +
                      "/data/pairs.jsonl --template alpaca");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("value_head.safetensors"), std::string::npos) << r.err;
  auto missing = run_unillm("eval reward --model " + source_path("assets/stories260K") + " --file " + dir + "/nope.json");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("nope.json"), std::string::npos) << missing.err;
}

}  // namespace
}  // namespace unillm
