// PiSSA (`pissa_init`, `pissa_iter`, `pissa_convert`) end to end on stories260K: `unillm train`
// lowers the loss, saves the adapter with PEFT's init_lora_weights string plus pissa_init/ and
// pissa_converted/ (rank 2r, LLaMA-Factory's PissaConvertCallback), and the converted adapter on
// the original base gives the trained model's logits, as does the adapter itself (re-decomposing
// the base on loading, PEFT's behaviour). LLaMA-Factory's refusals hold. (PEFT parity:
// tests/reference/lora_variants_check.py.)
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "models/adapter.h"
#include "models/causal_lm.h"
#include "reference/parity_driver_io.h"
#include "support/expect.h"
#include "support/run_cli.h"
#include "train_log_util.h"

namespace unillm {
namespace {

using testing::run_unillm;
using testing::source_path;

std::string config(const std::string& dir, const std::string& extra) {
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/pissa.yaml";
  std::ofstream(path) << "model_name_or_path: " << source_path("assets/stories260K") << "\n"
                      << "stage: sft\ndo_train: true\nfinetuning_type: lora\nlora_rank: 4\n"
                      << "lora_target: all\npissa_init: true\npissa_iter: 4\npissa_convert: true\n"
                      << "dataset: alpaca_en_demo\ndataset_dir: " << source_path("data") << "\n"
                      << "template: alpaca\ncutoff_len: 128\nmax_samples: 200\n"
                      << "output_dir: " << dir << "/out\n"
                      << "per_device_train_batch_size: 4\nlearning_rate: 2.0e-3\n"
                      << "max_steps: 20\nlogging_steps: 1\nsave_steps: 1000\nseed: 3\n"
                      << extra;
  return path;
}

using reference::logits;

nlohmann::json read_config(const std::string& dir) {
  std::ifstream f(dir + "/adapter_config.json");
  return nlohmann::json::parse(f);
}

TEST(Pissa, TrainsAndConverts) {
  const std::string dir = testing::temp_dir("pissa");
  auto r = run_unillm("train " + config(dir, "") + " --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<double> l = testing::train_losses(dir + "/out");
  ASSERT_EQ(l.size(), 20u);
  EXPECT_GT(l.front() - (l[17] + l[18] + l[19]) / 3, 0.3) << "the loss did not fall";
  EXPECT_EQ(read_config(dir + "/out").at("init_lora_weights"), "pissa_niter_4");
  const nlohmann::json conv = read_config(dir + "/out/pissa_converted");
  EXPECT_EQ(conv.at("init_lora_weights"), true);
  EXPECT_EQ(conv.at("r"), 8);
  EXPECT_EQ(conv.at("lora_alpha"), 16);  // 2 × (2 × rank), the same scaling
  EXPECT_EQ(read_config(dir + "/out/pissa_init").at("r"), 4);

  testing::init_cpu();
  auto model = models::load_causal_lm(source_path("assets/stories260K"));
  const std::vector<int32_t> ids{1, 403, 9, 77, 250, 31, 12, 5};
  const Tensor base = logits(*model, ids, {});
  models::load_adapter(*model, dir + "/out", "pissa");  // re-decomposes the base
  const Tensor trained = logits(*model, ids, {"pissa"});
  model->delete_adapter("pissa");  // gives the base its principal part back
  EXPECT_LE(testing::max_abs_diff(base, logits(*model, ids, {})), 1e-4);
  models::load_adapter(*model, dir + "/out/pissa_converted", "conv");
  EXPECT_GT(testing::max_abs_diff(trained, base), 1e-2);
  EXPECT_LE(testing::max_abs_diff(trained, logits(*model, ids, {"conv"})), 1e-4);
  model->delete_adapter("conv");
  models::load_adapter(*model, dir + "/out/pissa_init", "init");  // B0·A0 alone: a plain LoRA
  EXPECT_GT(testing::max_abs_diff(base, logits(*model, ids, {"init"})), 1e-2);
}

// A resumed run rebuilds the same residual (the subspace iteration is seeded by module name) and
// so continues exactly, converted adapter included.
TEST(Pissa, ResumesExactly) {
  const std::string dir = testing::temp_dir("pissa_resume");
  const std::string a_cfg = config(dir + "/a", "") + " max_steps=6 save_steps=3";
  const std::string b_cfg = config(dir + "/b", "") + " max_steps=6 save_steps=3";
  auto a = run_unillm("train " + a_cfg + " --quiet");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  auto killed = run_unillm("train " + b_cfg + " --quiet --kill-after-step 3");
  EXPECT_EQ(killed.exit_code, 128 + 9) << killed.err;
  auto resumed = run_unillm("train " + b_cfg + " resume_from_checkpoint=true --quiet");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_EQ(testing::train_losses(dir + "/a/out"), testing::train_losses(dir + "/b/out"));
  for (const char* f : {"/out/adapter_model.safetensors", "/out/pissa_converted/adapter_model.safetensors"})
    EXPECT_EQ(testing::slurp(dir + "/a" + f), testing::slurp(dir + "/b" + f)) << f;
}

TEST(Pissa, RefusalsNameTheKey) {
  const std::string dir = testing::temp_dir("pissa_bad");
  for (const char* extra : {"quantization_bit: 4\n", "use_dora: true\n", "pissa_iter: -2\n"}) {
    auto r = run_unillm("train " + config(dir, extra) + " --quiet");
    EXPECT_NE(r.exit_code, 0) << extra;
    EXPECT_NE(r.err.find("pissa"), std::string::npos) << extra << r.err;
  }
}

}  // namespace
}  // namespace unillm
