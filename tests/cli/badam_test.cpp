// BAdam (use_badam) and LLaMA-Pro (`unillm expand-layers`, use_llama_pro) end to end on the
// bundled stories260K: BAdam changes only the layers it visited and resumes exactly (random mode's
// RNG included); ratio mode moves at most its share of each tensor and resumes exactly; the
// expanded model's logits are bit-identical to the original's (its new layers are identities);
// LLaMA-Pro trains exactly the added layers, and with LoRA adapts exactly their projections (from
// LLaMA-Factory's own example); bad combinations are refused by name. (The package itself: tests/reference/badam_check.py; transformers loading the expanded
// dir: tests/reference/expand_layers_check.py.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/checkpoint.h"
#include "io/safetensors.h"
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

// Ratio mode: every tensor but the (tied) embedding moves, each in at most int(n · ratio) entries
// (no mask moves before step 100).
TEST(BAdamCli, RatioModeUpdatesAShareOfEachTensor) {
  const std::string dir = testing::temp_dir("badam_ratio");
  const std::string src = source_path("assets/stories260K");
  const std::string cfg = write_config(dir, "r", src,
                                       "finetuning_type: full\nuse_badam: true\nbadam_mode: ratio\n"
                                       "badam_update_ratio: 0.2\nbadam_mask_mode: scatter\n");
  const auto r = run_unillm("train " + cfg + " max_steps=6");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("BAdam (ratio mode)"), std::string::npos) << r.err;
  const auto moved = changed(src, dir + "/r");
  EXPECT_EQ(std::find(moved.begin(), moved.end(), "model.embed_tokens.weight"), moved.end());
  EXPECT_NE(std::find(moved.begin(), moved.end(), "model.norm.weight"), moved.end());
  EXPECT_NE(std::find(moved.begin(), moved.end(), "model.layers.4.mlp.down_proj.weight"),
            moved.end());
  const auto a = io::CheckpointReader::open(src), b = io::CheckpointReader::open(dir + "/r");
  for (const auto& n : moved) {
    const Tensor x = a.get(n), y = b.get(n);
    int64_t diff = 0;
    for (int64_t i = 0; i < x.numel(); ++i) diff += x.data<float>()[i] != y.data<float>()[i];
    EXPECT_LE(diff, static_cast<int64_t>(static_cast<double>(x.numel()) * 0.2)) << n;
    EXPECT_GT(diff, 0) << n;
  }
  EXPECT_LT(testing::train_losses(dir + "/r").back(), testing::train_losses(dir + "/r").front());
}

TEST(BAdamCli, RatioModeResumeIsExact) {
  testing::expect_exact_resume(testing::temp_dir("badam_ratio_resume"),
                               "learning_rate: 5.0e-3\nfinetuning_type: full\nuse_badam: true\n"
                               "badam_mode: ratio\nbadam_update_ratio: 0.3\nbadam_mask_mode: scatter\n");
}

TEST(BAdamCli, BadCombinationsAreRefusedByName) {
  const std::string dir = testing::temp_dir("badam_bad");
  const std::string model = source_path("assets/stories260K");
  const std::pair<const char*, const char*> cases[] = {
      {"finetuning_type: lora\nuse_badam: true\n", "Cannot use LoRA with GaLore, APOLLO or BAdam"},
      {"finetuning_type: freeze\nuse_badam: true\n", "finetuning_type: full"},
      {"finetuning_type: full\nuse_badam: true\nbadam_mode: ratio\nbadam_update_ratio: 2\n",
       "badam_update_ratio"},
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

// LLaMA-Pro with LoRA from LLaMA-Factory's extras/llama_pro/llama3_freeze_sft.yaml (paths, steps
// and samples changed, finetuning_type: lora) on a tiny 8-layer Llama 3 expanded by 8, as its
// expand.sh does: the adapter covers exactly every projection of layers 1, 3, …, 15 (stride 2),
// listed by full name in target_modules as LLaMA-Factory's find_expanded_modules hands PEFT.
TEST(ExpandLayers, LlamaProWithLoraAdaptsTheExpandedLayersOnly) {
  const std::string dir = testing::temp_dir("llama_pro_lora");
  std::ofstream(dir + "/llama3.json")
      << R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32,
            "intermediate_size": 64, "num_hidden_layers": 8, "num_attention_heads": 4,
            "num_key_value_heads": 2, "vocab_size": 128256, "max_position_embeddings": 1024,
            "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": true,
            "hidden_act": "silu", "initializer_range": 0.02, "bos_token_id": 128000,
            "eos_token_id": 128009, "torch_dtype": "float32"})";
  auto r = run_unillm("init --config " + dir + "/llama3.json --tokenizer " +
                      source_path("tests/data/llama3-tokenizer") + " --out " + dir + "/base");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_unillm("expand-layers --model " + dir + "/base --output " + dir + "/pro --num-expand 8");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string yaml =
      testing::slurp(source_path("tests/data/llamafactory_examples/extras/llama_pro/llama3_freeze_sft.yaml"));
  auto replace = [&yaml](const std::string& from, const std::string& to) {
    const size_t at = yaml.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    yaml.replace(at, from.size(), to);
  };
  replace("models/llama3-8b-pro", dir + "/pro");
  replace("saves/llama3-8b-pro/freeze/sft", dir + "/out");
  replace("finetuning_type: freeze", "finetuning_type: lora");
  replace("max_samples: 1000", "max_samples: 16");
  std::ofstream(dir + "/cfg.yaml") << yaml << "\ndataset_dir: " << source_path("data")
                                   << "\nmax_steps: 2\n";
  r = run_unillm("train " + dir + "/cfg.yaml --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> want_keys, want_targets;
  for (int l = 1; l < 16; l += 2)
    for (const char* m : {"mlp.down_proj", "mlp.gate_proj", "mlp.up_proj", "self_attn.k_proj",
                          "self_attn.o_proj", "self_attn.q_proj", "self_attn.v_proj"}) {
      const std::string module = "model.layers." + std::to_string(l) + "." + m;
      want_targets.push_back(module);
      for (const char* ab : {".lora_A.weight", ".lora_B.weight"})
        want_keys.push_back("base_model.model." + module + ab);
    }
  std::sort(want_keys.begin(), want_keys.end());
  std::sort(want_targets.begin(), want_targets.end());
  std::vector<std::string> keys;
  const auto adapter = io::SafetensorsFile::open(dir + "/out/adapter_model.safetensors");
  for (const auto& t : adapter->tensors()) keys.push_back(t.name);
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, want_keys);
  std::ifstream cf(dir + "/out/adapter_config.json");
  auto targets = nlohmann::json::parse(cf).at("target_modules").get<std::vector<std::string>>();
  std::sort(targets.begin(), targets.end());
  EXPECT_EQ(targets, want_targets);
}

}  // namespace
}  // namespace unillm
