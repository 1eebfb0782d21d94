// LLaMA-Factory's eval_on_each_dataset: each eval_dataset name is preprocessed and evaluated on its
// own and logged as eval_<name>_*. The same training with one eval_dataset at a time gives each
// name's eval_loss exactly (SFT, and DPO with precomputed reference log-probs, which index the
// composed rows); metric_for_best_model must name one of them.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "support/expect.h"
#include "support/run_cli.h"
#include "train_log_util.h"

namespace unillm {
namespace {

using nlohmann::json;
using testing::log_lines;
using testing::run_unillm_in;
using testing::slurp;
using testing::source_path;

// key -> the values it has in the run's log, in order.
std::vector<double> logged(const std::string& out, const std::string& key) {
  std::vector<double> v;
  for (const auto& l : log_lines(out))
    if (l.contains(key)) v.push_back(l[key].get<double>());
  return v;
}

testing::CliResult train(const std::string& config, const std::string& out, const std::string& flags) {
  return run_unillm_in(source_path(""), "train " + config + " output_dir=" + out + flags + " --quiet");
}

TEST(EvalOnEachDataset, EachNameIsItsOwnEvaluation) {
  const std::string dir = testing::temp_dir("evaleach");
  const std::string sft = "examples/train_lora/stories260K_lora_sft.yaml";
  const std::string flags = " val_size=0 eval_steps=2 max_steps=4 eval_on_start=false max_samples=12 save_steps=2"
                            " per_device_eval_batch_size=4 plot_loss=false";
  auto r = train(sft, dir + "/each", flags + " eval_dataset=identity,alpaca_en_demo eval_on_each_dataset=true");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(logged(dir + "/each", "eval_loss").empty());
  for (const char* name : {"identity", "alpaca_en_demo"}) {
    auto one = train(sft, dir + "/" + name, flags + " eval_dataset=" + name);
    ASSERT_EQ(one.exit_code, 0) << one.err;
    const auto want = logged(dir + "/" + name, "eval_loss");
    ASSERT_EQ(want.size(), 2u) << name;
    EXPECT_EQ(logged(dir + "/each", "eval_" + std::string(name) + "_loss"), want) << name;
    EXPECT_EQ(json::parse(slurp(dir + "/each/eval_results.json"))["eval_" + std::string(name) + "_loss"], want.back());
  }
  // Packed rows are packed per dataset: identity's packed evaluation is the one of identity alone.
  auto packed = train(sft, dir + "/packed", flags + " packing=true eval_dataset=identity,alpaca_en_demo"
                                                    " eval_on_each_dataset=true");
  ASSERT_EQ(packed.exit_code, 0) << packed.err;
  auto alone = train(sft, dir + "/packed_identity", flags + " packing=true eval_dataset=identity");
  ASSERT_EQ(alone.exit_code, 0) << alone.err;
  EXPECT_EQ(logged(dir + "/packed", "eval_identity_loss"), logged(dir + "/packed_identity", "eval_loss"));

  // The best checkpoint by one dataset's loss (lower is better: the name ends in loss, as HF).
  auto best = train(sft, dir + "/best", flags + " eval_dataset=identity,alpaca_en_demo eval_on_each_dataset=true"
                                                " load_best_model_at_end=true metric_for_best_model=eval_identity_loss");
  ASSERT_EQ(best.exit_code, 0) << best.err;
  const auto id = logged(dir + "/best", "eval_identity_loss");
  ASSERT_EQ(id.size(), 3u);  // steps 2 and 4, and the best checkpoint evaluated again
  const json state = json::parse(slurp(dir + "/best/trainer_state.json"));
  EXPECT_EQ(state["best_metric"].get<double>(), std::min(id[0], id[1]));
  EXPECT_EQ(state["best_model_checkpoint"], dir + "/best/checkpoint-" + (id[0] <= id[1] ? "2" : "4"));

  auto unnamed = train(sft, dir + "/unnamed", flags + " eval_dataset=identity,alpaca_en_demo eval_on_each_dataset=true"
                                                      " load_best_model_at_end=true");
  EXPECT_EQ(unnamed.exit_code, 1);
  EXPECT_NE(unnamed.err.find("metric_for_best_model 'loss' names no evaluation"), std::string::npos) << unnamed.err;
  EXPECT_NE(unnamed.err.find("identity_loss, alpaca_en_demo_loss"), std::string::npos) << unnamed.err;
}

// DPO with full fine-tuning keeps precomputed reference log-probs per row (ref_mode precompute):
// the composed rows index them, so each dataset's evaluation is the one of that dataset alone.
TEST(EvalOnEachDataset, PrecomputedReferenceIndexesTheComposedRows) {
  const std::string dir = testing::temp_dir("evaleachdpo");
  // Two ranking datasets: records 0-5 and 6-11 of dpo_en_demo, beside it.
  const json demo = json::parse(slurp(source_path("data/dpo_en_demo.json")));
  json info = json::parse(slurp(source_path("data/dataset_info.json")));
  for (int part : {0, 1}) {
    const std::string name = part == 0 ? "dpo_a" : "dpo_b";
    std::ofstream(dir + "/" + name + ".json") << json(std::vector<json>(demo.begin() + 6 * part, demo.begin() + 6 * part + 6)).dump();
    info[name] = info["dpo_en_demo"];
    info[name]["file_name"] = name + ".json";
  }
  std::ofstream(dir + "/dataset_info.json") << info.dump();
  std::filesystem::copy_file(source_path("data/dpo_en_demo.json"), dir + "/dpo_en_demo.json");
  const std::string dpo = "examples/train_lora/stories260K_lora_dpo.yaml";
  const std::string flags = " dataset_dir=" + dir + " finetuning_type=full ref_mode=precompute max_samples=6"
                            " cutoff_len=128 max_steps=2 gradient_accumulation_steps=1 eval_strategy=steps eval_steps=2"
                            " save_steps=2 per_device_eval_batch_size=2 plot_loss=false";
  auto r = train(dpo, dir + "/each", flags + " eval_dataset=dpo_a,dpo_b eval_on_each_dataset=true");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* name : {"dpo_a", "dpo_b"}) {
    auto one = train(dpo, dir + "/" + name, flags + " eval_dataset=" + name);
    ASSERT_EQ(one.exit_code, 0) << one.err;
    for (const char* metric : {"loss", "rewards/margins"}) {
      const auto want = logged(dir + "/" + name, "eval_" + std::string(metric));
      ASSERT_EQ(want.size(), 1u) << name << " " << metric;
      EXPECT_EQ(logged(dir + "/each", "eval_" + std::string(name) + "_" + metric), want) << name << " " << metric;
    }
  }
}

}  // namespace
}  // namespace unillm
