// `unillm train` and its memory plan on the bundled model: the plan is printed before the first
// step, a run that cannot fit is refused before anything is allocated or written, and the
// predicted peak is within ±15% of the measured process peak RSS.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>

#include <nlohmann/json.hpp>

#include "run_compare_util.h"
#include "tiny_qwen_util.h"
#include "support/expect.h"
#include "support/run_cli.h"

namespace unillm {
namespace {

namespace fs = std::filesystem;
using testing::run_unillm;
using testing::source_path;

std::string write_config(const std::string& dir, const std::string& extra) {
  std::string path = dir + "/cfg.yaml";
  std::ofstream(path) << "model_name_or_path: " << source_path("assets/stories260K") << "\n"
                      << "stage: pt\ndo_train: true\n"
                      << "dataset: tinyshakespeare\ndataset_dir: " << source_path("data") << "\n"
                      << "cutoff_len: 128\nmax_samples: 400\n"
                      << "output_dir: " << dir << "/out\n"
                      << "per_device_train_batch_size: 8\ngradient_accumulation_steps: 1\n"
                      << "learning_rate: 1.0e-3\nmax_steps: 3\nlogging_steps: 1\nsave_strategy: 'no'\n"
                      << extra;
  return path;
}

// Runs `unillm train` with UNILLM_MEMORY_LIMIT set to limit for the child only.
testing::CliResult train_with_limit(const std::string& cfg, const std::string& limit) {
  setenv("UNILLM_MEMORY_LIMIT", limit.c_str(), 1);
  auto r = run_unillm("train " + cfg + " --quiet --threads 2");
  unsetenv("UNILLM_MEMORY_LIMIT");
  return r;
}

double mib(const std::string& number, const std::string& unit) {
  return std::stod(number) * (unit == "GiB" ? 1024.0 : 1.0);
}

TEST(MemoryPlan, ImpossibleLimitIsRefusedBeforeAllocating) {
  std::string dir = testing::temp_dir("memplan-refuse");
  auto r = train_with_limit(write_config(dir, "finetuning_type: full\ndisable_gradient_checkpointing: true\n"), "1M");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("memory plan"), std::string::npos) << r.err;  // the plan is shown first
  EXPECT_NE(r.err.find("exceeds the 1 MiB available (UNILLM_MEMORY_LIMIT=1M)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("no single knob"), std::string::npos) << r.err;
  // Nothing after the plan ran: no model, no output dir, no step.
  EXPECT_FALSE(fs::exists(dir + "/out"));
  EXPECT_EQ(r.err.find("training "), std::string::npos) << r.err;
}

TEST(MemoryPlan, RefusalNamesTheKnobThatFits) {
  std::string dir = testing::temp_dir("memplan-knob");
  std::string cfg = write_config(dir, "finetuning_type: full\ndisable_gradient_checkpointing: true\n");
  auto probe = train_with_limit(cfg, "off");
  ASSERT_EQ(probe.exit_code, 0) << probe.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(probe.err, m, std::regex(R"(expected peak\s+([0-9.]+) (MiB|GiB))"))) << probe.err;
  const double plan = mib(m[1], m[2]);
  std::smatch off, on;
  ASSERT_TRUE(std::regex_search(probe.err, off, std::regex(R"(activations, recompute off\s+([0-9.]+) (MiB|GiB))")));
  ASSERT_TRUE(std::regex_search(probe.err, on, std::regex(R"(activations, recompute on\s+([0-9.]+) (MiB|GiB))")));
  // Half of what recompute saves under the plan of this run (the process baseline in the plan
  // moves by a MiB or so between runs on a busy machine): turning recompute on must be what fits.
  const double saved = mib(off[1], off[2]) - mib(on[1], on[2]);
  ASSERT_GT(saved, 4) << probe.err;
  const auto limit = static_cast<int64_t>(plan - saved / 2);
  auto r = train_with_limit(cfg, std::to_string(limit) + "M");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("set disable_gradient_checkpointing: false (recompute on)"), std::string::npos) << r.err;
}

// The plan against the process's peak RSS, full and LoRA, recompute on and off.
// The run's "predicted peak …, measured …" line as measured / predicted (NaN when absent).
double measured_over_predicted(const std::string& err) {
  std::smatch m;
  if (!std::regex_search(err, m, std::regex(R"(predicted peak ([0-9.]+) (MiB|GiB), measured ([0-9.]+) (MiB|GiB))")))
    return std::nan("");
  return mib(m[3], m[4]) / mib(m[1], m[2]);
}

TEST(MemoryPlan, PredictedPeakWithin15PercentOfMeasured) {
  for (const char* ft : {"full", "lora"})
    for (const char* rc : {"false", "true"}) {
      std::string dir = testing::temp_dir("memplan-acc");
      auto r = train_with_limit(
          write_config(dir, std::string("finetuning_type: ") + ft + "\ndisable_gradient_checkpointing: " + rc + "\n"),
          "off");
      ASSERT_EQ(r.exit_code, 0) << r.err;
      const double ratio = measured_over_predicted(r.err);
      EXPECT_NEAR(ratio, 1.0, 0.15) << ft << " recompute off=" << rc << ": " << r.err;
    }
}

// Tensor parallelism (tp 2 under mpirun; rank 0 reports): each process holds the whole model but
// computes half of every layer's heads and MLP width (and, with sequence parallelism, half of the
// residual rows), so its activations are near half of one process's; context parallelism splits
// the heads and runs everything else on half of the rows. The plan counts that share (and the
// weight blocks each split layer copies), within ±15% of the measured peak (one process's
// activations were 1.3-1.6x the peak measured here). Micro-batches of 32 × 256 tokens, so that
// activations are most of the peak.
TEST(MemoryPlan, TensorParallelPeakWithin15PercentOfMeasured) {
  for (const char* layout : {"tensor_parallel_degree=2 sequence_parallel=false",
                             "tensor_parallel_degree=2 sequence_parallel=true", "context_parallel_degree=2"})
    for (const char* rc : {"false", "true"}) {
      const std::string dir = testing::temp_dir("memplan-tp");
      const std::string cfg = write_config(dir, "finetuning_type: full\n");
      setenv("UNILLM_MEMORY_LIMIT", "off", 1);
      const auto r = testing::train_processes(2, cfg + " cutoff_len=256 max_samples=2000 per_device_train_batch_size=32 max_steps=2 " +
                                                       std::string(layout) + " disable_gradient_checkpointing=" + rc +
                                                       " --quiet --threads 1");
      unsetenv("UNILLM_MEMORY_LIMIT");
      ASSERT_EQ(r.exit_code, 0) << r.err;
      const double ratio = measured_over_predicted(r.err);
      EXPECT_NEAR(ratio, 1.0, 0.15) << layout << " recompute off=" << rc << ": " << r.err;
    }
}

// The plan's peak (bytes) for this config and extra command-line keys (--plan-only, no limit).
double planned_peak(const std::string& cfg, const std::string& keys) {
  const auto r = run_unillm("train " + cfg + " " + keys + " --plan-only --threads 2");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::smatch m;
  EXPECT_TRUE(std::regex_search(r.out, m, std::regex(R"("peak":([0-9]+))"))) << r.out;
  return m.empty() ? 0 : std::stod(m[1]);
}

// Evaluation in batches far wider than the training micro-batch (16 rows of 256 tokens against
// 1) is the run's peak: the plan counts its forward (a layer's tensors, without gradients) beside
// the state, within ±15% of the measured peak, and a limit between the two batch sizes' plans is
// met by the advice to evaluate in smaller batches. A random 2-layer Llama of hidden 512, so that
// the evaluation's tensors are large blocks (smaller ones stay in glibc's heap, whose resident
// size is not the allocator's to bound).
TEST(MemoryPlan, EvaluationBatchWithin15PercentOfMeasured) {
  const std::string dir = testing::temp_dir("memplan-eval");
  const std::string model =
      testing::init_random_model(dir, "llama", testing::llama_config(512, 2048, 2, 8, 520, 512, false));
  const std::string cfg = write_config(dir, "finetuning_type: lora\nval_size: 0.2\neval_strategy: steps\neval_steps: 1\n") +
                          " model_name_or_path=" + model + " cutoff_len=256 max_samples=2000 per_device_train_batch_size=1 max_steps=2";
  auto r = train_with_limit(cfg + " per_device_eval_batch_size=16", "off");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NEAR(measured_over_predicted(r.err), 1.0, 0.15) << r.err;
  const double one = planned_peak(cfg, "per_device_eval_batch_size=1");
  const double sixteen = planned_peak(cfg, "per_device_eval_batch_size=16");
  ASSERT_GT(sixteen - one, 100e6);  // 16 × 256 tokens' forward, about 150 MiB
  const std::string limit = std::to_string(static_cast<int64_t>((one + sixteen) / 2 / 1024)) + "K";
  auto refused = train_with_limit(cfg + " per_device_eval_batch_size=16", limit);
  EXPECT_EQ(refused.exit_code, 1) << refused.err;
  EXPECT_NE(refused.err.find("set per_device_eval_batch_size: "), std::string::npos) << refused.err;
}

// auto_find_batch_size (HF's, accelerate's rule: int(0.9 × the batch size) until one runs): with
// room for 12 rows of 256 tokens but not 14, batch 16 trains at 12 (16 -> 14 -> 12); without the
// key the run is refused. A resume keeps the checkpoint's 12 even with no limit at all.
TEST(MemoryPlan, AutoFindBatchSizeTakesTheLargestThatFits) {
  std::string dir = testing::temp_dir("memplan-autobatch");
  const std::string cfg = write_config(dir, "finetuning_type: full\ndisable_gradient_checkpointing: true\n") +
                          " cutoff_len=256 save_strategy=steps save_steps=1";
  const double p12 = planned_peak(cfg, "per_device_train_batch_size=12");
  const double p14 = planned_peak(cfg, "per_device_train_batch_size=14");
  ASSERT_GT(p14 - p12, 6e6);  // rows of activations apart, well beyond the baseline's wobble
  const std::string limit = std::to_string(static_cast<int64_t>((p12 + p14) / 2 / 1024)) + "K";
  auto refused = train_with_limit(cfg + " per_device_train_batch_size=16", limit);
  EXPECT_EQ(refused.exit_code, 1) << refused.err;
  auto r = train_with_limit(cfg + " per_device_train_batch_size=16 auto_find_batch_size=true", limit);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("auto_find_batch_size: per_device_train_batch_size 16 -> 12"), std::string::npos) << r.err;
  const auto state = nlohmann::json::parse(testing::slurp(dir + "/out/trainer_state.json"));
  EXPECT_EQ(state["train_batch_size"], 12);
  auto resumed = train_with_limit(cfg + " per_device_train_batch_size=16 auto_find_batch_size=true max_steps=4 "
                                        "resume_from_checkpoint=" + dir + "/out/checkpoint-3", "off");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("auto_find_batch_size: per_device_train_batch_size 12 as"), std::string::npos) << resumed.err;
  EXPECT_EQ(resumed.err.find("with per_device_train_batch_size"), std::string::npos) << resumed.err;
}

}  // namespace
}  // namespace unillm
