// `unillm train` with stage dpo end to end: LLaMA-Factory's llama3_lora_dpo.yaml (paths and
// template changed: examples/train_lora/stories260K_lora_dpo.yaml) on the bundled model and
// dpo_en_demo: step 1 is ln 2 with zero rewards, LLaMA-Factory's metrics are logged (train and
// eval), the adapter and the rewards/accuracies plot are written, a kill -9 resumes exactly; bad
// configs and malformed pairs are clear errors.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "dequantised_model_util.h"
#include "run_compare_util.h"
#include "support/expect.h"
#include "support/run_cli.h"
#include "train_log_util.h"

namespace unillm {
namespace {

namespace fs = std::filesystem;
using testing::log_lines;
using testing::train_lines;
using testing::run_unillm_in;
using testing::slurp;
using testing::source_path;

const char* kExample = "train examples/train_lora/stories260K_lora_dpo.yaml";
// A short run of the example: small data, a few steps, evaluation and checkpoints.
const char* kShort =
    " cutoff_len=96 max_samples=30 val_size=0.2 per_device_train_batch_size=2 gradient_accumulation_steps=2"
    " learning_rate=5.0e-3 warmup_ratio=0 max_steps=6 logging_steps=1 save_steps=3 eval_strategy=steps"
    " eval_steps=3 per_device_eval_batch_size=4 --quiet";

const char* kMetrics[] = {"rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins",
                          "logps/chosen",   "logps/rejected",   "logits/chosen",      "logits/rejected"};

// QLoRA under DPO: the reference (no grad) runs the same quantised products as the policy
// (grad), so step 1 is still exactly ln 2 with zero rewards. (Inference quantises the activations
// of quantised layers on VNNI CPUs; a training run keeps every forward exact. Without
// recompute the policy's forward runs under grad mode, which is where the two would part: 8-bit
// gave loss 0.6989 before the trainer kept its forwards exact.)
TEST(Dpo, QloraReferenceMatchesThePolicyAtStepOne) {
  const std::string dir = testing::temp_dir("dpo_qlora");
  for (const char* bits : {"8", "4"}) {
    auto r = run_unillm_in(source_path(""), std::string(kExample) + " output_dir=" + dir + "/q" + bits + kShort +
                                                " quantization_bit=" + bits + " max_steps=1 eval_strategy=no disable_gradient_checkpointing=true");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto lines = train_lines(dir + "/q" + bits);
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_EQ(lines[0]["loss"].get<double>(), 0.6931) << bits;
    EXPECT_EQ(lines[0]["rewards/chosen"].get<double>(), 0.0) << bits;
    EXPECT_EQ(lines[0]["rewards/rejected"].get<double>(), 0.0) << bits;
  }
}

TEST(Dpo, LlamaFactoryExampleTrainsLogsAndResumesExactly) {
  const std::string dir = testing::temp_dir("dpo");
  auto a = run_unillm_in(source_path(""), std::string(kExample) + " output_dir=" + dir + "/a" + kShort);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const auto lines = train_lines(dir + "/a");
  ASSERT_EQ(lines.size(), 6u);
  // Step 1: the fresh adapter's B is zero, so the policy is the reference.
  EXPECT_EQ(lines[0]["loss"].get<double>(), 0.6931);
  for (const char* k : kMetrics) ASSERT_TRUE(lines[0].contains(k)) << k;
  EXPECT_EQ(lines[0]["rewards/chosen"].get<double>(), 0.0);
  EXPECT_EQ(lines[0]["rewards/margins"].get<double>(), 0.0);
  EXPECT_LT(lines[0]["logps/chosen"].get<double>(), 0.0);
  EXPECT_NE(lines[1]["rewards/margins"].get<double>(), 0.0);  // trained from step 2 on
  bool eval_seen = false;
  for (auto& j : log_lines(dir + "/a"))
    if (j.contains("eval_loss")) {
      eval_seen = true;
      for (const char* k : kMetrics) EXPECT_TRUE(j.contains(std::string("eval_") + k)) << k;
      EXPECT_FALSE(j.contains("eval_perplexity"));
    }
  EXPECT_TRUE(eval_seen);
  for (const char* f : {"adapter_model.safetensors", "adapter_config.json", "training_loss.png",
                        "training_rewards_accuracies.png", "trainer_state.json", "all_results.json"})
    EXPECT_TRUE(fs::exists(dir + "/a/" + f)) << f;
  // kill -9 after step 3 (its checkpoint written), then resume: the same run.
  auto killed = run_unillm_in(source_path(""), std::string(kExample) + " output_dir=" + dir + "/b" + kShort +
                                                   " --kill-after-step 3");
  EXPECT_EQ(killed.exit_code, 128 + 9) << killed.err;
  ASSERT_TRUE(fs::exists(dir + "/b/checkpoint-3/trainer_state.json"));
  auto resumed = run_unillm_in(source_path(""), std::string(kExample) + " output_dir=" + dir + "/b" + kShort +
                                                    " resume_from_checkpoint=true");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  const auto again = train_lines(dir + "/b");
  ASSERT_EQ(again.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(again[i]["loss"], lines[i]["loss"]) << "step " << i + 1;
    EXPECT_EQ(again[i]["grad_norm"], lines[i]["grad_norm"]) << "step " << i + 1;
    EXPECT_EQ(again[i]["rewards/margins"], lines[i]["rewards/margins"]) << "step " << i + 1;
  }
  EXPECT_EQ(slurp(dir + "/a/adapter_model.safetensors"), slurp(dir + "/b/adapter_model.safetensors"));
}

// pref_bco_weight: at the reference (step 1) the rewards and the baseline are 0, so the DPO term is
// ln 2 and the BCO term 2·ln 2: the loss is (ln 2 + w·2 ln 2) / (1 + w). Its running baseline,
// checkpointed, makes a kill -9 resume the same run.
TEST(Dpo, BcoWeightTrainsAndItsBaselineResumesExactly) {
  const std::string dir = testing::temp_dir("dpo_bco");
  const std::string bco = std::string(kShort) + " pref_bco_weight=0.5";
  auto plain = run_unillm_in(source_path(""), std::string(kExample) + " output_dir=" + dir + "/p" + kShort);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  auto a = run_unillm_in(source_path(""), std::string(kExample) + " output_dir=" + dir + "/a" + bco);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const auto p = train_lines(dir + "/p"), lines = train_lines(dir + "/a");
  ASSERT_EQ(lines.size(), 6u);
  EXPECT_EQ(lines[0]["loss"].get<double>(), 0.9242);  // ln 2 · (1 + 2·0.5) / 1.5, rounded as logged
  EXPECT_EQ(p[0]["loss"].get<double>(), 0.6931);
  // At the reference BCO's gradient equals DPO's (both ∓β/2 per row), so step 2 is plain DPO's;
  // from step 3 on the policy has moved and BCO trains differently.
  EXPECT_EQ(lines[1]["rewards/margins"], p[1]["rewards/margins"]);
  EXPECT_NE(lines[2]["rewards/margins"], p[2]["rewards/margins"]);
  auto killed = run_unillm_in(source_path(""), std::string(kExample) + " output_dir=" + dir + "/b" + bco +
                                                   " --kill-after-step 3");
  EXPECT_EQ(killed.exit_code, 128 + 9) << killed.err;
  ASSERT_TRUE(fs::exists(dir + "/b/checkpoint-3/bco_running.json"));
  auto resumed = run_unillm_in(source_path(""), std::string(kExample) + " output_dir=" + dir + "/b" + bco +
                                                    " resume_from_checkpoint=true");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  const auto again = train_lines(dir + "/b");
  ASSERT_EQ(again.size(), 6u);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(again[i]["loss"], lines[i]["loss"]) << "step " << i + 1;
  EXPECT_EQ(slurp(dir + "/a/adapter_model.safetensors"), slurp(dir + "/b/adapter_model.safetensors"));
  // Refused where LLaMA-Factory cannot add it or would ignore it.
  for (const char* bad : {" pref_loss=kto_pair", " pref_loss=simpo"}) {
    auto r = run_unillm_in(source_path(""), std::string(kExample) + " output_dir=" + dir + "/c" + bco + bad);
    EXPECT_EQ(r.exit_code, 1) << bad;
    EXPECT_NE(r.err.find("pref_bco_weight"), std::string::npos) << r.err;
  }
}

// Full fine-tuning holds the reference as a frozen copy (ref_mode model) or as log-probs computed
// before step 1 (ref_mode precompute): the same run either way, and a precomputed run resumes from
// the table its checkpoint carries.
TEST(Dpo, FullFineTuningReferenceCopyOrPrecomputedIsTheSameRun) {
  const std::string dir = testing::temp_dir("dpo_full");
  const std::string full = std::string(kShort) + " finetuning_type=full bf16=false learning_rate=1.0e-3";
  auto copy = run_unillm_in(source_path(""), std::string(kExample) + " output_dir=" + dir + "/copy ref_mode=model" + full);
  ASSERT_EQ(copy.exit_code, 0) << copy.err;
  auto pre = run_unillm_in(source_path(""), std::string(kExample) + " output_dir=" + dir + "/pre ref_mode=precompute" + full);
  ASSERT_EQ(pre.exit_code, 0) << pre.err;
  EXPECT_TRUE(fs::exists(dir + "/pre/checkpoint-3/reference_logps.json"));
  EXPECT_FALSE(fs::exists(dir + "/copy/checkpoint-3/reference_logps.json"));
  const auto a = train_lines(dir + "/copy"), b = train_lines(dir + "/pre");
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), 6u);
  EXPECT_EQ(a[0]["loss"].get<double>(), 0.6931);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(a[i]["loss"], b[i]["loss"]) << "step " << i + 1;
    // The precomputed table comes from its own forwards (another batch shape): the same bits only
    // where the GEMM is shape-invariant (run_compare_util.h), else f32 rounding of a difference
    // of log-probabilities (seen: 2.7e-6 on an AVX2 machine).
    EXPECT_NEAR(a[i]["rewards/margins"].get<double>(), b[i]["rewards/margins"].get<double>(),
                testing::shape_invariant_gemm() ? 1e-9 : 1e-4)
        << "step " << i + 1;
  }
  // Resume the precomputed run from checkpoint-3: the table comes from the checkpoint.
  auto killed = run_unillm_in(source_path(""), std::string(kExample) + " output_dir=" + dir + "/pre2 ref_mode=precompute" +
                                                   full + " --kill-after-step 3");
  EXPECT_EQ(killed.exit_code, 128 + 9) << killed.err;
  auto resumed = run_unillm_in(source_path(""), std::string(kExample) + " output_dir=" + dir +
                                                    "/pre2 ref_mode=precompute resume_from_checkpoint=true" + full);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  const auto c = train_lines(dir + "/pre2");
  ASSERT_EQ(c.size(), 6u);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(c[i]["grad_norm"], b[i]["grad_norm"]) << "step " << i + 1;
  EXPECT_EQ(slurp(dir + "/pre/model.safetensors"), slurp(dir + "/pre2/model.safetensors"));
  // A resumed precomputed run needs its table.
  fs::remove(dir + "/pre2/checkpoint-3/reference_logps.json");
  auto lost = run_unillm_in(source_path(""), std::string(kExample) + " output_dir=" + dir +
                                                 "/pre2 ref_mode=precompute resume_from_checkpoint=" + dir +
                                                 "/pre2/checkpoint-3" + full);
  EXPECT_EQ(lost.exit_code, 1);
  EXPECT_NE(lost.err.find("reference_logps.json"), std::string::npos) << lost.err;
}

// ref_model_quantization_bit (LLaMA-Factory): the ref_model held as QLoRA holds its base. LoRA on
// stories260K against ref_model = stories260K quantised to 4 (or 8) bits is the run against a
// dense ref_model holding the weights those codes stand for; step 1 is no longer ln 2 (the
// reference is not the policy). Without ref_model it is refused, as the copy of the policy would
// not be quantised there.
TEST(Dpo, QuantisedRefModelIsTheDequantisedReference) {
  const std::string dir = testing::temp_dir("dpo_refq");
  const std::string stories = source_path("assets/stories260K");
  for (int bits : {4, 8}) {
    const std::string b = std::to_string(bits);
    testing::write_dequantised_copy(stories, dir + "/dequantised" + b, bits);
    // f32 (the example trains bf16, whose frozen weights would be rounded before quantising).
    const std::string run = std::string(kExample) + kShort + " bf16=false eval_strategy=no ref_model=" + stories;
    auto q = run_unillm_in(source_path(""), run + " output_dir=" + dir + "/q" + b + " ref_model_quantization_bit=" + b);
    ASSERT_EQ(q.exit_code, 0) << q.err;
    EXPECT_NE(q.err.find("ref_model quantised to " + b + " bits"), std::string::npos) << q.err;
    auto d = run_unillm_in(source_path(""), std::string(kExample) + kShort + " bf16=false eval_strategy=no ref_model=" + dir +
                                                "/dequantised" + b + " output_dir=" + dir + "/d" + b);
    ASSERT_EQ(d.exit_code, 0) << d.err;
    const auto x = train_lines(dir + "/q" + b), y = train_lines(dir + "/d" + b);
    ASSERT_EQ(x.size(), 6u);
    ASSERT_EQ(y.size(), 6u);
    EXPECT_NE(x[0]["loss"].get<double>(), 0.6931) << bits;
    for (size_t i = 0; i < 6; ++i)
      for (const char* k : {"loss", "rewards/margins", "logps/chosen"})
        EXPECT_NEAR(x[i][k].get<double>(), y[i][k].get<double>(), 1e-4 * (1 + std::abs(y[i][k].get<double>())))
            << bits << " step " << i + 1 << " " << k;
  }
  auto bare = run_unillm_in(source_path(""), std::string(kExample) + kShort + " output_dir=" + dir +
                                                 "/bare ref_model_quantization_bit=4");
  EXPECT_EQ(bare.exit_code, 1);
  EXPECT_NE(bare.err.find("ref_model_quantization_bit applies to ref_model"), std::string::npos) << bare.err;
}

// ref_model_quantization_bit with ref_model_adapters: LLaMA-Factory loads the quantised ref_model
// with its one adapter unmerged; that reference gives the run against the dense dequantised copy
// with the same adapter merged. The adapter is a short DPO run's (its B is non-zero), and it
// changes the run; two adapters are refused as there.
TEST(Dpo, QuantisedRefModelKeepsItsAdapterUnmerged) {
  const std::string dir = testing::temp_dir("dpo_refq_adapter");
  const std::string stories = source_path("assets/stories260K");
  testing::write_dequantised_copy(stories, dir + "/dequantised", 4);
  const std::string run = std::string(kExample) + kShort + " bf16=false eval_strategy=no";
  ASSERT_EQ(run_unillm_in(source_path(""), run + " learning_rate=0.05 output_dir=" + dir + "/adapter").exit_code, 0);
  const std::string adapter = " ref_model_adapters=" + dir + "/adapter";
  auto q = run_unillm_in(source_path(""), run + " ref_model=" + stories + " ref_model_quantization_bit=4" + adapter +
                                              " output_dir=" + dir + "/q");
  ASSERT_EQ(q.exit_code, 0) << q.err;
  EXPECT_NE(q.err.find("with its ref_model_adapter over the quantised weights"), std::string::npos) << q.err;
  auto d = run_unillm_in(source_path(""), run + " ref_model=" + dir + "/dequantised" + adapter + " output_dir=" + dir + "/d");
  ASSERT_EQ(d.exit_code, 0) << d.err;
  auto bare = run_unillm_in(source_path(""), run + " ref_model=" + stories + " ref_model_quantization_bit=4 output_dir=" +
                                                 dir + "/bare");
  ASSERT_EQ(bare.exit_code, 0) << bare.err;
  const auto x = train_lines(dir + "/q"), y = train_lines(dir + "/d"), z = train_lines(dir + "/bare");
  ASSERT_EQ(x.size(), 6u);
  ASSERT_EQ(y.size(), 6u);
  ASSERT_EQ(z.size(), 6u);
  EXPECT_GT(std::abs(x[0]["rewards/margins"].get<double>() - z[0]["rewards/margins"].get<double>()), 1e-3);
  for (size_t i = 0; i < 6; ++i)
    for (const char* k : {"loss", "rewards/margins", "logps/chosen"})
      EXPECT_NEAR(x[i][k].get<double>(), y[i][k].get<double>(), 1e-4 * (1 + std::abs(y[i][k].get<double>())))
          << " step " << i + 1 << " " << k;
  auto two = run_unillm_in(source_path(""), run + " ref_model=" + stories + " ref_model_quantization_bit=4" + adapter +
                                                "," + dir + "/adapter output_dir=" + dir + "/two");
  EXPECT_EQ(two.exit_code, 1);
  EXPECT_NE(two.err.find("takes one ref_model_adapters entry, got 2"), std::string::npos) << two.err;
}

// metric_for_best_model takes the stage's metrics, as HF takes any eval_ key.
TEST(Dpo, BestCheckpointByRewardAccuracy) {
  const std::string dir = testing::temp_dir("dpo_best");
  auto r = run_unillm_in(source_path(""), std::string(kExample) + " output_dir=" + dir + "/a" + kShort +
                                              " save_strategy=steps load_best_model_at_end=true"
                                              " metric_for_best_model=eval_rewards/accuracies");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto state = nlohmann::json::parse(slurp(dir + "/a/trainer_state.json"));
  ASSERT_TRUE(state.contains("best_metric") && !state["best_metric"].is_null()) << state.dump();
  double best = -1;
  for (auto& j : log_lines(dir + "/a"))
    if (j.contains("eval_rewards/accuracies")) best = std::max(best, j["eval_rewards/accuracies"].get<double>());
  EXPECT_EQ(state["best_metric"].get<double>(), best);
}

void expect_error(const testing::CliResult& r, const std::string& needle) {
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << "missing '" << needle << "' in: " << r.err;
}

TEST(Dpo, BadConfigsAndMalformedPairsAreClearErrors) {
  const std::string dir = testing::temp_dir("dpo_bad");
  const std::string run = std::string(kExample) + " output_dir=" + dir + "/out max_steps=1 --quiet";
  const std::string src = source_path("");
  expect_error(run_unillm_in(src, run + " dataset=alpaca_en_demo"), "not a ranking dataset");
  expect_error(run_unillm_in(src, run + " ref_model_adapters=x"), "ref_model_adapters needs ref_model");
  expect_error(run_unillm_in(src, run + " ref_mode=copy"), "ref_mode");
  expect_error(run_unillm_in(src, run + " pref_loss=hinge dpo_label_smoothing=0.1"), "dpo_label_smoothing");
  expect_error(run_unillm_in(src, run + " pref_loss=dpo"), "pref_loss");
  expect_error(run_unillm_in(src, run + " pref_beta=0"), "pref_beta");
  expect_error(run_unillm_in(src, run + " metric_for_best_model=eval_rewards/nope"), "rewards/nope");
  expect_error(run_unillm_in(src, run + " metric_for_best_model=accuracy"), "rewards/accuracies");
  fs::create_directories(dir + "/data");
  std::ofstream(dir + "/data/dataset_info.json")
      << R"({"pairs": {"file_name": "pairs.jsonl", "ranking": true, "columns": {"prompt": "instruction",)"
      << R"( "chosen": "chosen", "rejected": "rejected"}}})";
  std::ofstream(dir + "/data/pairs.jsonl") << R"({"instruction": "hi", "chosen": "a", "rejected": "b"})" << "\n"
                                           << R"({"instruction": "hi", "chosen": "same", "rejected": "same"})" << "\n";
  auto bad = run_unillm_in(src, run + " dataset=pairs dataset_dir=" + dir + "/data");
  expect_error(bad, "pairs.jsonl");
  EXPECT_NE(bad.err.find("line 2"), std::string::npos) << bad.err;
  EXPECT_FALSE(fs::exists(dir + "/out/adapter_model.safetensors"));
}

}  // namespace
}  // namespace unillm
