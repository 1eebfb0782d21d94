// LLaMA-Factory's mixture_of_depths from the CLI: `convert` routes every odd layer of a plain model
// and saves the mixture-of-depth package's format, a resumed run routes as the uninterrupted one
// (the capacity counter is in the checkpoint), `load` continues such a checkpoint, and what is not
// built is refused by name. The arithmetic is checked against the package itself in
// tests/reference/mod_check.py.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "pt_run_util.h"

namespace unillm {
namespace {

using testing::pt_config;
using testing::run_unillm;
using testing::slurp;

const std::string kConvert = "finetuning_type: full\nmixture_of_depths: convert\nlearning_rate: 0.001\n";

TEST(MixtureOfDepths, ConvertResumesExactlyAndSavesThePackagesFormat) {
  const std::string dir = testing::temp_dir("mod_resume");
  // Killed after step 7 and resumed from checkpoint-6: six training forwards set the capacity
  // (0.125 + 0.875 / 6), a counter started over would route all but one token of each row.
  testing::expect_exact_resume(dir, kConvert);
  const auto cfg = nlohmann::json::parse(slurp(dir + "/a/config.json"));
  EXPECT_EQ(cfg["architectures"][0], "LlamaMoDForCausalLM");
  auto st = io::SafetensorsFile::open(dir + "/a/model.safetensors");
  for (const std::string l : {"1", "3"}) {
    EXPECT_TRUE(st->has("model.layers." + l + ".router.weight_predictor.weight")) << l;
    EXPECT_TRUE(st->has("model.layers." + l + ".router.weight_predictor.bias")) << l;
    EXPECT_TRUE(st->has("model.layers." + l + ".block.mlp.down_proj.weight")) << l;
    EXPECT_FALSE(st->has("model.layers." + l + ".mlp.down_proj.weight")) << l;
  }
  EXPECT_TRUE(st->has("model.layers.2.mlp.down_proj.weight"));
  EXPECT_EQ(st->tensor("model.layers.1.router.weight_predictor.weight").shape(), (Shape{1, 64}));

  // `load` continues it (the routers are read, not drawn again); without the key config.json's
  // architectures say what it is.
  const std::string again = "finetuning_type: full\nmixture_of_depths: load\n";
  auto r = run_unillm("train " + pt_config(dir, "load", again, dir + "/a") + " max_steps=2 --quiet");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = run_unillm("train " + pt_config(dir, "nokey", "finetuning_type: full\n", dir + "/a") + " max_steps=2");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("mixture_of_depths: layers 1, 3 route"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("new routers"), std::string::npos) << r.err;

  // Generation is refused by name (the package's decoding caches only the routed tokens).
  r = run_unillm("generate --model " + dir + "/a --prompt-ids 1 --max-new-tokens 4 --quiet");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("generation with a mixture-of-depths model is not implemented"), std::string::npos) << r.err;
  r = run_unillm("export --format gguf --model " + dir + "/a --output " + dir + "/a.gguf");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("llama.cpp has no routed layers"), std::string::npos) << r.err;
}

TEST(MixtureOfDepths, LoraTrainsTheRoutedLayersBlocks) {
  const std::string dir = testing::temp_dir("mod_lora");
  const auto r = run_unillm("train " + pt_config(dir, "lora", "finetuning_type: lora\nlora_target: all\n"
                                                              "mixture_of_depths: convert\n") + " max_steps=2 --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto st = io::SafetensorsFile::open(dir + "/lora/adapter_model.safetensors");
  EXPECT_TRUE(st->has("base_model.model.model.layers.1.block.self_attn.q_proj.lora_A.weight"));
  EXPECT_TRUE(st->has("base_model.model.model.layers.2.self_attn.q_proj.lora_A.weight"));
  // export merges it into the base routed as in training: the same routers, drawn from the same
  // seed (the adapter does not hold them) as a full run at learning rate 0 keeps them.
  std::ofstream(dir + "/export.yaml") << "model_name_or_path: " << testing::source_path("assets/stories260K")
                                      << "\nadapter_name_or_path: " << dir << "/lora\nfinetuning_type: lora\n"
                                      << "mixture_of_depths: convert\nseed: 3\nexport_dir: " << dir << "/merged\n";
  auto e = run_unillm("export " + dir + "/export.yaml");
  ASSERT_EQ(e.exit_code, 0) << e.err;
  EXPECT_EQ(e.err.find("ignored"), std::string::npos) << e.err;
  auto still = run_unillm("train " + pt_config(dir, "still", "finetuning_type: full\nmixture_of_depths: convert\n"
                                                             "learning_rate: 0\n") + " max_steps=1 --quiet");
  ASSERT_EQ(still.exit_code, 0) << still.err;
  auto merged = io::SafetensorsFile::open(dir + "/merged/model.safetensors");
  auto kept = io::SafetensorsFile::open(dir + "/still/model.safetensors");
  for (const std::string n : {"model.layers.1.router.weight_predictor.weight", "model.layers.3.router.weight_predictor.bias"})
    EXPECT_EQ(testing::max_abs_diff(merged->tensor(n), kept->tensor(n)), 0.0) << n;
  EXPECT_EQ(nlohmann::json::parse(slurp(dir + "/merged/config.json"))["architectures"][0], "LlamaMoDForCausalLM");
}

TEST(MixtureOfDepths, WrongUseIsRefusedByName) {
  const std::string dir = testing::temp_dir("mod_refused");
  struct Case {
    std::string extra, model, says, overrides;
  };
  const std::string plain = testing::source_path("assets/stories260K");
  auto conv = run_unillm("train " + pt_config(dir, "conv", kConvert) + " max_steps=1 --quiet");
  ASSERT_EQ(conv.exit_code, 0) << conv.err;
  const std::vector<Case> cases = {
      {"mixture_of_depths: load\n", plain, "is not a mixture-of-depths checkpoint (architectures: LlamaForCausalLM)", ""},
      {"mixture_of_depths: convert\n", dir + "/conv", "is already a mixture-of-depths model (LlamaMoDForCausalLM)", ""},
      {"mixture_of_depths: sideways\n", plain, "mixture_of_depths", ""},
      {"mixture_of_depths: convert\n", plain, "mixture_of_depths with stage dpo is not implemented", " stage=dpo"},
      {"mixture_of_depths: convert\nneat_packing: true\n", plain, "mixture_of_depths with neat_packing", ""},
      {"mixture_of_depths: convert\ndo_predict: true\npredict_with_generate: true\n", plain,
       "mixture_of_depths with predict_with_generate is not implemented", ""},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto r = run_unillm("train " + pt_config(dir, "c" + std::to_string(i), cases[i].extra, cases[i].model) +
                              cases[i].overrides + " --quiet");
    EXPECT_EQ(r.exit_code, 1) << cases[i].extra << r.err;
    EXPECT_NE(r.err.find(cases[i].says), std::string::npos) << cases[i].extra << r.err;
  }
}

}  // namespace
}  // namespace unillm
