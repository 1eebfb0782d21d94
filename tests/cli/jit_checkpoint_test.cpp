// enable_jit_checkpoint (HF's): SIGTERM, as a preemption sends it, makes the run finish its step,
// save a checkpoint there and stop with exit code 143, writing no final output; the resume from
// that checkpoint is the uninterrupted run. Without the key SIGTERM ends the process as before,
// with no checkpoint of that step. Under mpirun every process agrees on the step it stops at.
// --term-after-step N raises a real SIGTERM in the process after step N (the handler's path).
#include <gtest/gtest.h>

#include <filesystem>

#include "run_compare_util.h"

namespace unillm {
namespace {

namespace fs = std::filesystem;
using testing::train_processes;

const std::string kRun = testing::kStoriesSft + " finetuning_type=full max_steps=8 logging_steps=1 save_steps=4 "
                         "eval_strategy=no max_samples=64 per_device_train_batch_size=2 --quiet";

TEST(JitCheckpoint, SigtermSavesTheStepAndTheResumeIsTheUninterruptedRun) {
  const std::string dir = testing::temp_dir("jit");
  for (int np : {1, 2}) {
    const std::string n = std::to_string(np);
    auto straight = train_processes(np, kRun + " output_dir=" + dir + "/straight" + n);
    ASSERT_EQ(straight.exit_code, 0) << straight.err;
    const std::string run = kRun + " enable_jit_checkpoint=true output_dir=" + dir + "/jit" + n;
    auto stopped = train_processes(np, run + " --term-after-step 6");
    EXPECT_EQ(stopped.exit_code, 143) << stopped.err;
    EXPECT_NE(stopped.err.find("enable_jit_checkpoint: SIGTERM received; step 6 is saved in"), std::string::npos)
        << stopped.err;
    EXPECT_TRUE(fs::exists(dir + "/jit" + n + "/checkpoint-6/trainer_state.json")) << np;
    EXPECT_FALSE(fs::exists(dir + "/jit" + n + "/model.safetensors")) << np;  // no final output
    auto resumed = train_processes(np, run + " resume_from_checkpoint=true");
    ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
    testing::expect_runs_close(dir + "/straight" + n, dir + "/jit" + n, "np " + n);
    EXPECT_LE(testing::max_weight_diff(dir + "/straight" + n + "/model.safetensors", dir + "/jit" + n + "/model.safetensors"),
              0.0) << np;
  }
  // A SIGTERM right after a scheduled checkpoint saves nothing twice.
  auto at_save = train_processes(1, kRun + " enable_jit_checkpoint=true output_dir=" + dir + "/at_save --term-after-step 4");
  EXPECT_EQ(at_save.exit_code, 143) << at_save.err;
  EXPECT_EQ(at_save.err.find("saved " + dir + "/at_save/checkpoint-4"), at_save.err.rfind("saved " + dir + "/at_save/checkpoint-4"));
  // Without the key SIGTERM ends the process at once: no checkpoint of step 6.
  auto plain = train_processes(1, kRun + " output_dir=" + dir + "/plain --term-after-step 6");
  EXPECT_NE(plain.exit_code, 0);
  EXPECT_FALSE(fs::exists(dir + "/plain/checkpoint-6")) << plain.err;
  EXPECT_TRUE(fs::exists(dir + "/plain/checkpoint-4/trainer_state.json")) << plain.err;
}

}  // namespace
}  // namespace unillm
