// BAdam (use_badam) and LLaMA-Pro (`unillm expand-layers`, use_llama_pro) end to end on the
// bundled stories260K: BAdam changes only the layers it visited and resumes exactly (random mode's
// RNG included); the expanded model's logits are bit-identical to the original's (its new layers
// are identities); LLaMA-Pro trains exactly the added layers; bad combinations are refused by
// name. (The package itself: tests/reference/badam_check.py; transformers loading the expanded
// dir: tests/reference/expand_layers_check.py.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/checkpoint.h"
#include "models/causal_lm.h"
#include "reference/parity_driver_io.h"
#include "support/expect.h"
#include "support/run_cli.h"
#include "pt_run_util.h"
#include "train_log_util.h"

namespace unillm {
namespace {

namespace fs = std::filesystem;
using testing::run_unillm;
using testing::source_path;

// The optimiser tests' pt run (pt_run_util.h) on `model`, at learning_rate 5e-3.
std::string write_config(const std::string& dir, const std::string& name, const std::string& model,
                         const std::string& extra) {
  return testing::pt_config(dir, name, "learning_rate: 5.0e-3\n" + extra, model);
}

// Names of the tensors whose bytes differ between two checkpoints (same names in both).
std::vector<std::string> changed(const std::string& a_dir, const std::string& b_dir) {
  const auto a = io::CheckpointReader::open(a_dir), b = io::CheckpointReader::open(b_dir);
  std::vector<std::string> out;
  for (const auto& n : a.names()) {
    const Tensor x = a.get(n), y = b.get(n);
    EXPECT_EQ(x.nbytes(), y.nbytes()) << n;
    if (x.nbytes() != y.nbytes() || std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) != 0)
      out.push_back(n);
  }
  return out;
}

bool in_layers(const std::string& name, const std::vector<int>& layers) {
  for (int l : layers)
    if (name.rfind("model.layers." + std::to_string(l) + ".", 0) == 0) return true;
  return false;
}

TEST(BAdamCli, TrainsOnlyTheLayersItVisited) {
  const std::string dir = testing::temp_dir("badam_layers");
  // Ascending every 3: layer 0 for steps 1-2, layer 1 for 3-5, layer 2 for step 6.
  const std::string cfg =
      write_config(dir, "a", source_path("assets/stories260K"),
                   "finetuning_type: full\nuse_badam: true\nbadam_switch_interval: 3\n"
                   "badam_verbose: 1\n");
  const auto r = run_unillm("train " + cfg + " max_steps=6");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("model.layers.2. train"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("weight_decay 0.01"), std::string::npos) << r.err;  // said at start
  const auto moved = changed(source_path("assets/stories260K"), dir + "/a");
  ASSERT_FALSE(moved.empty());
  for (const auto& n : moved) EXPECT_TRUE(in_layers(n, {0, 1, 2})) << n << " changed";
  for (int l : {0, 1, 2}) {
    const std::string q = "model.layers." + std::to_string(l) + ".self_attn.q_proj.weight";
    EXPECT_NE(std::find(moved.begin(), moved.end(), q), moved.end()) << q << " did not change";
  }
  EXPECT_LT(testing::train_losses(dir + "/a").back(), testing::train_losses(dir + "/a").front());
}

TEST(BAdamCli, RandomModeResumeIsExact) {
  const std::string dir = testing::temp_dir("badam_resume");
  const std::string extra =
      "finetuning_type: full\nuse_badam: true\nbadam_switch_mode: random\nbadam_switch_interval: "
      "2\n";
  testing::expect_exact_resume(dir, "learning_rate: 5.0e-3\n" + extra, 8);
}

TEST(BAdamCli, BadCombinationsAreRefusedByName) {
  const std::string dir = testing::temp_dir("badam_bad");
  const std::string model = source_path("assets/stories260K");
  const std::pair<const char*, const char*> cases[] = {
      {"finetuning_type: lora\nuse_badam: true\n", "Cannot use LoRA with GaLore, APOLLO or BAdam"},
      {"finetuning_type: freeze\nuse_badam: true\n", "finetuning_type: full"},
      {"finetuning_type: full\nuse_badam: true\nbadam_mode: ratio\n", "badam_mode: ratio"},
      {"finetuning_type: full\nuse_badam: true\nbadam_switch_mode: fixed\n",
       "needs badam_start_block"},
      {"finetuning_type: full\nuse_badam: true\noptim: sgd\n", "optim must be adamw"},
      {"finetuning_type: full\nuse_badam: true\nbadam_start_block: 9\n",
       "badam_start_block 9 is out of range"},
      {"finetuning_type: full\nuse_llama_pro: true\n", "only valid for Freeze or LoRA"},
      {"finetuning_type: freeze\nuse_llama_pro: true\nfreeze_trainable_layers: 2\n", "divisible"},
  };
  int i = 0;
  for (const auto& [extra, message] : cases) {
    const auto r = run_unillm(
        "train " + write_config(dir, "c" + std::to_string(i++), model, extra) + " --quiet");
    EXPECT_NE(r.exit_code, 0) << extra;
    EXPECT_NE(r.err.find(message), std::string::npos) << extra << "\n" << r.err;
  }
}

TEST(ExpandLayers, KeepsTheLogitsAndLlamaProTrainsTheNewLayers) {
  testing::init_cpu();
  const std::string dir = testing::temp_dir("expand_layers");
  const std::string src = source_path("assets/stories260K"), pro = dir + "/pro";
  const auto r =
      run_unillm("expand-layers --model " + src + " --output " + pro + " --num-expand 5");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream cf(pro + "/config.json");
  EXPECT_EQ(nlohmann::json::parse(cf).at("num_hidden_layers"), 10);
  EXPECT_TRUE(fs::exists(pro + "/tokenizer.json") || fs::exists(pro + "/tokenizer.model"));
  // Layer 2k+1 copies layer k with o_proj and down_proj zeroed.
  const auto a = io::CheckpointReader::open(src), b = io::CheckpointReader::open(pro);
  const Tensor q = a.get("model.layers.3.self_attn.q_proj.weight"),
               q7 = b.get("model.layers.7.self_attn.q_proj.weight");
  EXPECT_EQ(std::memcmp(q.raw_data(), q7.raw_data(), q.nbytes()), 0);
  EXPECT_EQ(testing::max_abs_diff(b.get("model.layers.7.mlp.down_proj.weight"),
                                  Tensor::zeros({64, 172}, DType::f32)),
            0.0);
  auto original = models::load_causal_lm(src), expanded = models::load_causal_lm(pro);
  const std::vector<int32_t> ids = {1, 403, 407, 261, 378, 288, 263, 339, 281, 1};
  EXPECT_EQ(testing::max_abs_diff(reference::logits(*original, ids, {}),
                                  reference::logits(*expanded, ids, {})),
            0.0);
  // A second run into the same dir needs --force; a group size that does not divide is refused.
  EXPECT_NE(
      run_unillm("expand-layers --model " + src + " --output " + pro + " --num-expand 5").exit_code,
      0);
  const auto bad =
      run_unillm("expand-layers --model " + src + " --output " + dir + "/x --num-expand 2");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("divisible"), std::string::npos) << bad.err;

  // LLaMA-Pro: freeze_trainable_layers 5 of 10 → stride 2 → layers 1, 3, 5, 7, 9 train.
  const std::string cfg = write_config(
      dir, "t", pro, "finetuning_type: freeze\nfreeze_trainable_layers: 5\nuse_llama_pro: true\n");
  const auto t = run_unillm("train " + cfg + " max_steps=3 --quiet");
  ASSERT_EQ(t.exit_code, 0) << t.err;
  const auto moved = changed(pro, dir + "/t");
  for (const auto& n : moved) EXPECT_TRUE(in_layers(n, {1, 3, 5, 7, 9})) << n << " changed";
  for (int l : {1, 3, 5, 7, 9}) {
    const std::string o = "model.layers." + std::to_string(l) + ".self_attn.o_proj.weight";
    EXPECT_NE(std::find(moved.begin(), moved.end(), o), moved.end()) << o << " did not train";
  }
}

}  // namespace
}  // namespace unillm
