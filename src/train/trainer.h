// The training loop for `unillm train`: data → micro-batches → loss → backward → clip → AdamW,
// with logging (trainer_log.jsonl), evaluation, checkpoints and exact resume. The library never
// prints: progress and messages go through TrainerHooks.
#pragma once

#include <functional>
#include <string>

#include "train/args.h"

namespace unillm::dist {
class ProcessGroup;
}

namespace unillm::train {

struct MemoryPlan;  // train/memory_plan.h

struct ProgressInfo {
  int64_t step = 0, total_steps = 0;
  double loss = 0, lr = 0, grad_norm = 0, tokens_per_s = 0, epoch = 0;
  double elapsed_s = 0, remaining_s = 0;
  size_t memory_bytes = 0;
};

struct TrainerHooks {
  std::function<void(const std::string&)> info;  // one message line
  std::function<void(const ProgressInfo&)> progress;  // after every optimizer step
  std::string hf_cache_root;  // where hub ids are looked up (from HF_HOME etc., by the CLI)
  // The memory a run may use (bytes; 0 = do not check) and where that figure came from, for the
  // refusal message (the CLI: UNILLM_MEMORY_LIMIT, else MemAvailable / the cgroup limit).
  int64_t memory_limit = 0;
  std::string memory_limit_source;
  // Fault-injection points for crash tests: after an optimizer step (and its checkpoint), and
  // after a checkpoint's files are written but before the directory is committed.
  std::function<void(int64_t step)> after_step;
  std::function<void(int64_t step)> before_checkpoint_commit;
  // After the final output is written into its staging dir, before it is moved into output_dir.
  std::function<void()> before_output_commit;
  // Data parallelism (docs/training.md, "Several processes"): the group of the run's processes,
  // or null for one. Each takes its share of a step's gradient_accumulation_steps × size
  // micro-batches; gradients are summed over the group; rank 0 alone writes output_dir.
  dist::ProcessGroup* dp = nullptr;
  // Plan only (`unillm train --plan-only`, `unillm tune`): when set, the run stops once the
  // memory plan is built (as the layout's process; ZeRO's share included), hands it here and
  // returns, before output_dir or any weight is touched. A plan over memory_limit is handed over
  // too rather than refused: the caller compares.
  std::function<void(const MemoryPlan&)> plan_only;
  // enable_jit_checkpoint: whether this process has been asked to stop (the CLI's SIGTERM flag),
  // read after every optimizer step.
  std::function<bool()> stop_requested;
};

struct TrainResult {
  int64_t steps = 0;
  double train_loss = 0;  // mean of the step losses of this run (HF's train_loss)
  double final_eval_loss = -1;  // -1 when not evaluated
  double test_loss = -1;        // do_predict; -1 when not run
  std::string output_dir;
  // enable_jit_checkpoint stopped the run after checkpointing step `steps`: nothing was written
  // as the final output (resume from the checkpoint to finish).
  bool interrupted = false;
};

TrainResult run_training(const TrainArgs& args, const TrainerHooks& hooks);

}  // namespace unillm::train
