// do_train: false (HF / LLaMA-Factory): the loaded model, with its adapters, is evaluated — no
// step, no weights written — and its figures equal the training run's evaluation of the same
// weights; bf16_full_eval / fp16_full_eval evaluate the model with its matrices rounded to that
// dtype (checked against the f32 evaluation of a copy whose matrices were rounded beforehand).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "models/causal_lm.h"
#include "models/save.h"
#include "ops/cast.h"
#include "pt_run_util.h"
#include "support/expect.h"

namespace unillm {
namespace {

namespace fs = std::filesystem;
using testing::pt_config;
using testing::run_unillm;
using testing::source_path;

double eval_loss_of(const std::string& out) {
  std::ifstream f(out + "/eval_results.json");
  EXPECT_TRUE(f.good()) << out;
  return nlohmann::json::parse(f).at("eval_loss").get<double>();
}

std::vector<double> logged_eval_losses(const std::string& out) {
  std::vector<double> v;
  for (const auto& l : testing::log_lines(out))
    if (l.contains("eval_loss")) v.push_back(l["eval_loss"].get<double>());
  return v;
}

const std::string kEval = "val_size: 0.1\ndo_eval: true\n";
const std::string kNoTrain = " do_train=false";  // pt_config says do_train: true

TEST(EvalOnly, EvaluatesTheLoadedModelWithoutTraining) {
  const std::string dir = testing::temp_dir("eval_only");
  // A LoRA run evaluated at its start and at its last step.
  const std::string lora = "finetuning_type: lora\nlora_rank: 8\nlearning_rate: 0.01\n" + kEval +
                           "eval_strategy: steps\neval_steps: 6\neval_on_start: true\n";
  const auto trained = run_unillm("train " + pt_config(dir, "trained", lora) + " max_steps=6 --quiet");
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  const auto during = logged_eval_losses(dir + "/trained");
  ASSERT_EQ(during.size(), 2u);

  // The base alone, and the trained adapter: the training run's two evaluations.
  const auto base = run_unillm("train " + pt_config(dir, "base", "finetuning_type: full\n" + kEval) + kNoTrain);
  ASSERT_EQ(base.exit_code, 0) << base.err;
  EXPECT_NE(base.out.find("evaluated (do_train: false): eval_loss="), std::string::npos) << base.out;
  EXPECT_DOUBLE_EQ(eval_loss_of(dir + "/base"), during[0]);
  const auto adapted = run_unillm("train " + pt_config(dir, "adapted", "finetuning_type: lora\n" + kEval +
                                                                         "adapter_name_or_path: " + dir + "/trained\n") +
                                  kNoTrain);
  ASSERT_EQ(adapted.exit_code, 0) << adapted.err;
  EXPECT_NEAR(eval_loss_of(dir + "/adapted"), during[1], 1e-6 * during[1]);
  for (const char* absent : {"model.safetensors", "adapter_model.safetensors", "checkpoint-12", "train_results.json"})
    EXPECT_FALSE(fs::exists(dir + "/adapted/" + absent)) << absent;
  EXPECT_TRUE(fs::exists(dir + "/adapted/all_results.json"));

  const auto none = run_unillm("train " + pt_config(dir, "none", "finetuning_type: full\ndo_eval: true\n") + kNoTrain);
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_NE(none.err.find("evaluation (do_eval / eval_strategy) needs eval_dataset or val_size"), std::string::npos)
      << none.err;
}

TEST(EvalOnly, FullEvalCastsTheMatricesAndIsRefusedInTraining) {
  const std::string dir = testing::temp_dir("full_eval");
  const std::string cfg = "finetuning_type: full\n" + kEval;
  const auto f32 = run_unillm("train " + pt_config(dir, "f32", cfg) + kNoTrain);
  ASSERT_EQ(f32.exit_code, 0) << f32.err;
  testing::init_cpu();
  for (const auto& [key, dtype] : {std::pair{"bf16_full_eval", DType::bf16}, std::pair{"fp16_full_eval", DType::f16}}) {
    const std::string name = std::string(key).substr(0, 4);
    const auto r = run_unillm("train " + pt_config(dir, name, cfg + key + ": true\n") + kNoTrain);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find(std::string(key) + ": the model's matrices are held in"), std::string::npos) << r.err;
    // The same model with its matrices rounded beforehand, evaluated in f32.
    auto model = models::load_causal_lm(source_path("assets/stories260K"));
    for (auto& p : model->module().parameters())
      if (p.tensor->ndim() >= 2) *p.tensor = ops::cast(ops::cast(*p.tensor, dtype), DType::f32);
    models::SaveOptions so;
    so.tokenizer_dir = source_path("assets/stories260K");
    models::save_pretrained(*model, dir + "/rounded_" + name, so);
    const auto rounded = run_unillm("train " + pt_config(dir, "eval_rounded_" + name, cfg, dir + "/rounded_" + name) + kNoTrain);
    ASSERT_EQ(rounded.exit_code, 0) << rounded.err;
    const double got = eval_loss_of(dir + "/" + name), want = eval_loss_of(dir + "/eval_rounded_" + name);
    EXPECT_NEAR(got, want, 1e-6 * want) << key;
    EXPECT_GT(std::fabs(got - eval_loss_of(dir + "/f32")), 1e-7) << key << ": rounding changed nothing";
  }
  const auto train = run_unillm("train " + pt_config(dir, "train", "finetuning_type: full\nbf16_full_eval: true\n"));
  EXPECT_EQ(train.exit_code, 1);
  EXPECT_NE(train.err.find("bf16_full_eval with do_train is not implemented"), std::string::npos) << train.err;
}

}  // namespace
}  // namespace unillm
