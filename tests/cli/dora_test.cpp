// DoRA (`use_dora: true`) end to end on stories260K: `unillm train` lowers the loss and saves a
// PEFT DoRA adapter (use_dora in adapter_config.json, one lora_magnitude_vector per targeted
// module), `unillm export` merges it into weights whose logits equal base + adapter, and QLoRA +
// DoRA equals DoRA over the dequantised base. (PEFT parity: tests/reference/lora_variants_check.py.)
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "models/adapter.h"
#include "models/causal_lm.h"
#include "dequantised_model_util.h"
#include "reference/parity_driver_io.h"
#include "support/expect.h"
#include "support/run_cli.h"
#include "train_log_util.h"

namespace unillm {
namespace {

using testing::run_unillm;
using testing::source_path;

std::string config(const std::string& dir, const std::string& extra) {
  const std::string path = dir + "/dora.yaml";
  std::ofstream(path) << "model_name_or_path: " << source_path("assets/stories260K") << "\n"
                      << "stage: sft\ndo_train: true\nfinetuning_type: lora\nlora_rank: 8\n"
                      << "lora_target: all\nuse_dora: true\nlora_dropout: 0.05\n"
                      << "dataset: alpaca_en_demo\ndataset_dir: " << source_path("data") << "\n"
                      << "template: alpaca\ncutoff_len: 128\nmax_samples: 200\n"
                      << "output_dir: " << dir << "/out\n"
                      << "per_device_train_batch_size: 4\nlearning_rate: 5.0e-3\n"
                      << "max_steps: 20\nlogging_steps: 1\nsave_steps: 1000\nseed: 3\n"
                      << extra;
  return path;
}

using reference::logits;

TEST(Dora, TrainsSavesAndExports) {
  const std::string dir = testing::temp_dir("dora");
  auto r = run_unillm("train " + config(dir, "") + " --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<double> l = testing::train_losses(dir + "/out");
  ASSERT_EQ(l.size(), 20u);
  EXPECT_GT(l.front() - (l[17] + l[18] + l[19]) / 3, 0.3) << "the loss did not fall";

  std::ifstream cf(dir + "/out/adapter_config.json");
  EXPECT_EQ(nlohmann::json::parse(cf).at("use_dora"), true);
  const auto ckpt = io::CheckpointReader::open(dir + "/out/adapter_model.safetensors");
  int magnitudes = 0;
  for (const auto& k : ckpt.names())
    if (k.size() > 22 && k.compare(k.size() - 22, 22, ".lora_magnitude_vector") == 0) ++magnitudes;
  testing::init_cpu();
  auto model = models::load_causal_lm(source_path("assets/stories260K"));
  EXPECT_EQ(magnitudes, 7 * model->config().num_layers);  // q k v o gate up down

  std::ofstream(dir + "/merge.yaml") << "model_name_or_path: " << source_path("assets/stories260K")
                                     << "\nadapter_name_or_path: " << dir << "/out\nfinetuning_type: lora\n"
                                     << "export_dir: " << dir << "/merged\n";
  auto e = run_unillm("export " + dir + "/merge.yaml");
  ASSERT_EQ(e.exit_code, 0) << e.err;
  models::load_adapter(*model, dir + "/out", "dora");
  const std::vector<int32_t> ids{1, 403, 9, 77, 250, 31, 12, 5};
  const Tensor adapted = logits(*model, ids, {"dora"});
  auto merged = models::load_causal_lm(dir + "/merged");
  EXPECT_GT(testing::max_abs_diff(adapted, logits(*model, ids, {})), 1e-2);
  EXPECT_LE(testing::max_abs_diff(adapted, logits(*merged, ids, {})), 1e-4);
}

// The magnitudes and their optimizer state are checkpointed with A and B: a resumed run is the
// uninterrupted one (dropout on, so the masks' RNG is resumed too).
TEST(Dora, ResumesExactly) {
  const std::string dir = testing::temp_dir("dora_resume");
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

// QLoRA + DoRA (PEFT's DoRA over bitsandbytes layers: W dequantised for the norms and DoRA's own
// product) is DoRA over the weights the codes stand for: stories260K quantised to nf4 as the run
// does it, against plain DoRA on a copy whose projections hold those weights dequantised. Same
// initial magnitudes, losses within 1e-5 over 20 steps, the same adapter within rounding.
TEST(Dora, QloraWithDoraIsDoraOverTheDequantisedBase) {
  const std::string dir = testing::temp_dir("dora_q");
  testing::write_dequantised_copy(source_path("assets/stories260K"), dir + "/dequantised", 4);

  auto q = run_unillm("train " + config(dir, "quantization_bit: 4\n") + " output_dir=" + dir + "/qdora --quiet");
  ASSERT_EQ(q.exit_code, 0) << q.err;
  auto d = run_unillm("train " + config(dir, "") + " model_name_or_path=" + dir + "/dequantised output_dir=" + dir +
                      "/dora --quiet");
  ASSERT_EQ(d.exit_code, 0) << d.err;
  const auto lq = testing::train_losses(dir + "/qdora"), ld = testing::train_losses(dir + "/dora");
  ASSERT_EQ(lq.size(), 20u);
  ASSERT_EQ(ld.size(), 20u);
  for (size_t i = 0; i < lq.size(); ++i) EXPECT_NEAR(lq[i], ld[i], 1e-5 * std::abs(ld[i])) << "step " << i + 1;
  EXPECT_LT(lq.back(), lq.front());
  const auto aq = io::SafetensorsFile::open(dir + "/qdora/adapter_model.safetensors");
  const auto ad = io::SafetensorsFile::open(dir + "/dora/adapter_model.safetensors");
  ASSERT_EQ(aq->tensors().size(), ad->tensors().size());
  int magnitudes = 0;
  for (const auto& info : aq->tensors()) {
    const std::string& name = info.name;
    ASSERT_TRUE(ad->has(name)) << name;
    const std::vector<float> x = aq->tensor(name).to_float_vector(), y = ad->tensor(name).to_float_vector();
    ASSERT_EQ(x.size(), y.size()) << name;
    for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], y[i], 1e-4 * (std::abs(y[i]) + 1e-2)) << name << " " << i;
    magnitudes += name.find("lora_magnitude_vector") != std::string::npos;
  }
  EXPECT_GT(magnitudes, 0);
  EXPECT_EQ(nlohmann::json::parse(testing::slurp(dir + "/qdora/adapter_config.json"))["use_dora"], true);
}

}  // namespace
}  // namespace unillm
