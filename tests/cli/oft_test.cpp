// OFT (`finetuning_type: oft`) end to end on stories260K: `unillm train` lowers the loss, trains
// only the oft_R weights and saves a PEFT OFT adapter (peft_type OFT, one oft_R per targeted
// module, down_proj's 172 inputs moved to PEFT's adjusted block size 4); the adapter reloads
// with the same logits, `unillm export` merges it into weights whose logits equal base + adapter,
// `unillm generate --adapter` (the serving engine's row path) greedily writes what the merged
// model writes; QOFT trains over a 4-bit base; bad keys are refused by name. (PEFT parity:
// tests/reference/oft_check.py.)
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/checkpoint.h"
#include "models/adapter.h"
#include "models/causal_lm.h"
#include "reference/parity_driver_io.h"
#include "support/expect.h"
#include "support/run_cli.h"
#include "train_log_util.h"

namespace unillm {
namespace {

using reference::logits;
using testing::run_unillm;
using testing::source_path;

std::string config(const std::string& dir, const std::string& extra) {
  const std::string path = dir + "/oft.yaml";
  std::ofstream(path) << "model_name_or_path: " << source_path("assets/stories260K") << "\n"
                      << "stage: sft\ndo_train: true\nfinetuning_type: oft\noft_block_size: 16\n"
                      << "oft_target: all\n"
                      << "dataset: alpaca_en_demo\ndataset_dir: " << source_path("data") << "\n"
                      << "template: alpaca\ncutoff_len: 128\nmax_samples: 200\n"
                      << "output_dir: " << dir << "/out\n"
                      << "per_device_train_batch_size: 4\nlearning_rate: 1.0e-2\n"
                      << "max_steps: 16\nlogging_steps: 1\nsave_steps: 1000\nseed: 3\n"
                      << extra;
  return path;
}

TEST(Oft, TrainsSavesReloadsExportsAndGenerates) {
  const std::string dir = testing::temp_dir("oft");
  auto r = run_unillm("train " + config(dir, "") + " --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<double> l = testing::train_losses(dir + "/out");
  ASSERT_EQ(l.size(), 16u);
  EXPECT_GT(l.front() - (l[13] + l[14] + l[15]) / 3, 0.2) << "the loss did not fall";

  std::ifstream cf(dir + "/out/adapter_config.json");
  const auto cfg = nlohmann::json::parse(cf);
  EXPECT_EQ(cfg.at("peft_type"), "OFT");
  EXPECT_EQ(cfg.at("oft_block_size"), 16);
  EXPECT_EQ(cfg.at("r"), 0);
  const auto ckpt = io::CheckpointReader::open(dir + "/out/adapter_model.safetensors");
  testing::init_cpu();
  auto model = models::load_causal_lm(source_path("assets/stories260K"));
  ASSERT_EQ(ckpt.names().size(), static_cast<size_t>(7 * model->config().num_layers));  // q k v o gate up down
  // 64 inputs: 4 blocks of 16; down_proj's 172: PEFT moves 16 to the divisor 4 (43 blocks).
  EXPECT_EQ(ckpt.info("base_model.model.model.layers.0.self_attn.q_proj.oft_R.weight").shape, (Shape{4, 120}));
  EXPECT_EQ(ckpt.info("base_model.model.model.layers.0.mlp.down_proj.oft_R.weight").shape, (Shape{43, 6}));

  models::load_adapter(*model, dir + "/out", "oft");
  const std::vector<int32_t> ids{1, 403, 9, 77, 250, 31, 12, 5};
  const Tensor adapted = logits(*model, ids, {"oft"});
  EXPECT_GT(testing::max_abs_diff(adapted, logits(*model, ids, {})), 1e-2);

  std::ofstream(dir + "/merge.yaml") << "model_name_or_path: " << source_path("assets/stories260K")
                                     << "\nadapter_name_or_path: " << dir << "/out\nfinetuning_type: oft\n"
                                     << "export_dir: " << dir << "/merged\n";
  auto e = run_unillm("export " + dir + "/merge.yaml");
  ASSERT_EQ(e.exit_code, 0) << e.err;
  auto merged = models::load_causal_lm(dir + "/merged");
  EXPECT_LE(testing::max_abs_diff(adapted, logits(*merged, ids, {})), 1e-4);

  const std::string gen = " --prompt-ids 1,403,9,77 --temperature 0 --max-new-tokens 24 --quiet";
  auto with_adapter = run_unillm("generate --model " + source_path("assets/stories260K") + " --adapter " +
                                 dir + "/out" + gen);
  auto from_merged = run_unillm("generate --model " + dir + "/merged" + gen);
  auto from_base = run_unillm("generate --model " + source_path("assets/stories260K") + gen);
  ASSERT_EQ(with_adapter.exit_code, 0) << with_adapter.err;
  ASSERT_EQ(from_merged.exit_code, 0) << from_merged.err;
  EXPECT_EQ(with_adapter.out, from_merged.out);
  EXPECT_NE(with_adapter.out, from_base.out) << "the adapter changed nothing";
}

// The oft_R weights and their optimizer state are checkpointed: a resumed run is the
// uninterrupted one.
TEST(Oft, ResumesExactly) {
  const std::string dir = testing::temp_dir("oft_resume");
  for (const char* d : {"/a", "/b"}) std::filesystem::create_directories(dir + d);
  const std::string a_cfg = config(dir + "/a", "") + " max_steps=6 save_steps=3";
  const std::string b_cfg = config(dir + "/b", "") + " max_steps=6 save_steps=3";
  auto a = run_unillm("train " + a_cfg + " --quiet");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  auto killed = run_unillm("train " + b_cfg + " --quiet --kill-after-step 3");
  EXPECT_EQ(killed.exit_code, 128 + 9) << killed.err;
  auto resumed = run_unillm("train " + b_cfg + " resume_from_checkpoint=true --quiet");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_EQ(testing::train_losses(dir + "/a/out"), testing::train_losses(dir + "/b/out"));
  EXPECT_EQ(testing::slurp(dir + "/a/out/adapter_model.safetensors"),
            testing::slurp(dir + "/b/out/adapter_model.safetensors"));
}

TEST(Oft, BadKeysAreRefusedByName) {
  const std::string dir = testing::temp_dir("oft_bad");
  auto both = run_unillm("train " + config(dir, "oft_rank: 4\n") + " --quiet");
  EXPECT_NE(both.exit_code, 0);
  EXPECT_NE(both.err.find("exactly one of oft_rank"), std::string::npos) << both.err;
  auto full = run_unillm("train " + config(dir, "") + " finetuning_type=full quantization_bit=4 --quiet");
  EXPECT_NE(full.exit_code, 0);
  EXPECT_NE(full.err.find("quantization_bit"), std::string::npos) << full.err;
}

// QOFT (quantization_bit with finetuning_type oft, LLaMA-Factory's extras/qoft): the rotations
// train over the nf4 base and the adapter is a plain PEFT OFT adapter.
TEST(Oft, TrainsOverAFourBitBase) {
  const std::string dir = testing::temp_dir("oft_q");
  auto r = run_unillm("train " + config(dir, "quantization_bit: 4\n") + " --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<double> l = testing::train_losses(dir + "/out");
  ASSERT_EQ(l.size(), 16u);
  EXPECT_GT(l.front() - (l[13] + l[14] + l[15]) / 3, 0.2) << "the loss did not fall";
  std::ifstream cf(dir + "/out/adapter_config.json");
  EXPECT_EQ(nlohmann::json::parse(cf).at("peft_type"), "OFT");
}

}  // namespace
}  // namespace unillm
