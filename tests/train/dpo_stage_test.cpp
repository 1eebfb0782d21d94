// Stage dpo on a tiny random model with a fresh LoRA adapter (B = 0): the policy equals the
// reference bit for bit, so the sigmoid loss is ln 2 and every reward 0 (the issue's step-1
// check); the reference really runs without the adapter once B moves; eval weights the loss by
// pairs; a batch that is not pairs is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "core/rng.h"
#include "models/causal_lm.h"
#include "models/save.h"
#include "support/expect.h"
#include "padded_rows_util.h"
#include "tiny_llama_util.h"
#include "support/run_cli.h"
#include "train/memory_plan.h"
#include "train/stages/stage.h"

namespace unillm::train {
namespace {

std::unique_ptr<models::CausalLM> tiny_with_adapter() { return testing::tiny_llama("dpo_stage", 2, true); }

// Two pairs: chosen rows 0, 1 then rejected rows 2, 3; prompts of 3 tokens are not scored.
data::Batch two_pairs() {
  return testing::padded_rows(
      {{1, 5, 6, 7, 8, 9, 10}, {1, 11, 12, 13, 14, 0, 0}, {1, 5, 6, 20, 21, 0, 0}, {1, 11, 12, 30, 31, 32, 33}}, 3, 2);
}

double metric(const StageMetrics& m, const std::string& name) {
  for (const auto& [k, v] : m)
    if (k == name) return v;
  ADD_FAILURE() << name << " not logged";
  return NAN;
}

TEST(DpoStage, FreshAdapterGivesLn2AndZeroRewards) {
  testing::init_cpu();
  auto model = tiny_with_adapter();
  TrainArgs a;
  a.stage = "dpo";
  auto stage = make_stage(a);
  MicroOptions o;
  o.seed = 1;
  const MicroResult r = stage->train_micro(*model, two_pairs(), o);
  EXPECT_NEAR(r.loss, std::log(2.0), 1e-12);
  for (const char* k : {"rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies"})
    EXPECT_EQ(metric(r.metrics, k), 0.0) << k;
  EXPECT_LT(metric(r.metrics, "logps/chosen"), 0.0);
  // Only the adapter's B gets a gradient at B = 0 (dA = B·… = 0).
  double b_norm = 0;
  for (auto& [name, t] : model->module().named_adapter_parameters("default", true))
    if (name.find("lora_B") != std::string::npos)
      for (float g : t.contiguous().to_float_vector()) b_norm += double(g) * g;
  EXPECT_GT(b_norm, 0.0);
}

// LLaMA-Factory v1's trainer weighs each micro-batch's mean loss by its share of the step's
// scored tokens (base_trainer.fit: loss × mini_valid / step_valid), where v0's DPO takes the mean
// of the micro-batches: micro_weight is 1 / the step's scored tokens, and train_micro counts its
// loss and gradient its own scored tokens (12 in two_pairs) times.
TEST(DpoStage, V1WeighsMicroBatchesByTheirScoredTokens) {
  testing::init_cpu();
  TrainArgs a;
  a.stage = "dpo";
  TrainArgs v1 = a;
  v1.v1_train_dataset = "pairs.jsonl";
  auto v0_stage = make_stage(a), v1_stage = make_stage(v1);
  const std::vector<data::Batch> group = {two_pairs(), two_pairs()};
  EXPECT_DOUBLE_EQ(v0_stage->micro_weight(group), 0.5);
  EXPECT_DOUBLE_EQ(v1_stage->micro_weight(group), 1.0 / 24);
  MicroOptions o;
  o.seed = 1;
  const auto b_grad_norm2 = [](models::CausalLM& m) {
    double n = 0;
    for (auto& [name, t] : m.module().named_adapter_parameters("default", true))
      if (name.find("lora_B") != std::string::npos)
        for (float g : t.contiguous().to_float_vector()) n += double(g) * g;
    return n;
  };
  auto m0 = tiny_with_adapter(), m1 = tiny_with_adapter();
  const MicroResult r0 = v0_stage->train_micro(*m0, two_pairs(), o);
  const MicroResult r1 = v1_stage->train_micro(*m1, two_pairs(), o);
  EXPECT_NEAR(r1.loss, 12 * r0.loss, 1e-9);
  EXPECT_NEAR(b_grad_norm2(*m1), 144 * b_grad_norm2(*m0), 1e-6 * b_grad_norm2(*m1));
  EXPECT_GT(b_grad_norm2(*m0), 0.0);
}

TEST(DpoStage, ReferenceRunsWithoutTheAdapter) {
  testing::init_cpu();
  auto model = tiny_with_adapter();
  // Move B away from zero: the policy now differs from the reference.
  for (auto& [name, t] : model->module().named_adapter_parameters("default"))
    if (name.find("lora_B") != std::string::npos) {
      Tensor v = t.contiguous();
      float* p = v.data<float>();
      for (int64_t i = 0; i < v.numel(); ++i) p[i] = 0.05f * static_cast<float>((i % 7) - 3);
      t.copy_from(v);
    }
  TrainArgs a;
  a.stage = "dpo";
  auto stage = make_stage(a);
  const data::Batch b = two_pairs();
  const EvalPart e = stage->eval_batch(*model, b);
  EXPECT_EQ(e.count, 2);
  EXPECT_NE(metric(e.metrics, "rewards/chosen"), 0.0);
  // The same loss as a training micro-batch, weighted by its 2 pairs.
  MicroOptions o;
  o.seed = 0;  // no backward
  EXPECT_NEAR(e.loss_sum, 2 * stage->train_micro(*model, b, o).loss, 1e-9);
  // Base only: the reference itself, so the loss is ln 2 again.
  model->set_active_adapters({});
  EXPECT_NEAR(stage->eval_batch(*model, b).loss_sum, 2 * std::log(2.0), 1e-12);
}

// ref_mode auto: full fine-tuning takes a frozen copy when the plan with it fits the memory
// limit, else precomputed log-probs; LoRA switches its adapters off and adds nothing.
TEST(DpoStage, MemoryPlanChoosesTheReference) {
  const std::string path = testing::temp_dir("dpo_plan") + "/config.json";
  std::ofstream(path) << R"({"model_type": "llama", "vocab_size": 32000, "hidden_size": 768, "intermediate_size": 2048,
                             "num_hidden_layers": 12, "num_attention_heads": 12})";
  TrainArgs a;
  a.stage = "dpo";
  a.finetuning_type = "full";
  MemoryPlanInputs in;
  in.model = models::load_model_config(path);
  in.params = summarize_params(in.model, a);
  in.rows = 4;
  in.seq_len = 128;
  const int64_t without = plan_memory(in).peak;
  MemoryPlanInputs copy = in;
  auto stage = make_stage(a);
  EXPECT_EQ(stage->plan_memory(copy, 0), "");
  EXPECT_EQ(copy.reference_weights, in.params.base);
  EXPECT_EQ(plan_memory(copy).reference, in.params.base * 4);
  const int64_t with_copy = plan_memory(copy).peak;
  EXPECT_GT(with_copy, without + in.params.base * 4 - 1);
  MemoryPlanInputs tight = in;
  EXPECT_EQ(stage->plan_memory(tight, with_copy - 1), "");
  EXPECT_EQ(tight.reference_weights, 0);
  EXPECT_LT(plan_memory(tight).peak, with_copy);
  a.ref_mode = "model";  // forced: planned as a copy, with advice naming precompute
  MemoryPlanInputs forced = in;
  EXPECT_NE(make_stage(a)->plan_memory(forced, with_copy - 1).find("ref_mode: precompute"), std::string::npos);
  EXPECT_EQ(forced.reference_weights, in.params.base);
  a.ref_mode = "auto";
  a.finetuning_type = "lora";
  MemoryPlanInputs lora = in;
  EXPECT_EQ(make_stage(a)->plan_memory(lora, 1), "");
  EXPECT_EQ(lora.reference_weights, 0);
  EXPECT_EQ(lora.reference_logps_rows, 0);
}

TEST(DpoStage, RefusesRowsThatAreNotPairs) {
  testing::init_cpu();
  auto model = tiny_with_adapter();
  TrainArgs a;
  a.stage = "dpo";
  data::Batch b = two_pairs();
  b.group = 1;
  EXPECT_THROW(make_stage(a)->train_micro(*model, b, MicroOptions{}), ShapeError);
}

}  // namespace
}  // namespace unillm::train
