// Training checkpoints: output_dir/checkpoint-N/ holds the model (HF dir), the optimizer state,
// and trainer_state.json with the step, RNG, data position and log history. Written into a
// temporary dir and renamed, so a crash mid-write leaves the previous checkpoint intact.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "models/causal_lm.h"
#include "train/lr_schedule.h"
#include "train/optimizer.h"

namespace unillm::train {

struct TrainerState {
  int64_t global_step = 0;
  double epoch = 0;  // fractional, as HF logs it
  int64_t loader_epoch = 0, loader_batch = 0;  // data position of the next micro-batch
  std::array<uint64_t, 4> rng{};
  nlohmann::json log_history = nlohmann::json::array();
  int64_t tokens_seen = 0;
  double elapsed_seconds = 0;
  // fp16's loss scaler (train/loss_scaler.h), saved so a resumed run scales as the original.
  double loss_scale = 0;  // 0: no scaler
  int64_t loss_scale_growth_tracker = 0;
  // A mixture-of-depths model's count of training forwards (CausalLM::mod_calls), which sets its
  // routed layers' capacity; the package keeps it in the module only, so its resume starts over.
  int64_t mod_calls = 0;
  // HF's best checkpoint (metric_for_best_model): the best metric so far and the dir holding
  // those weights (a checkpoint-N, or output_dir for the final model); "" = none yet.
  std::optional<double> best_metric;
  std::string best_model_checkpoint;
  // HF's EarlyStoppingCallback counter (evaluations without improvement), written as HF writes
  // it under stateful_callbacks; read back only with restore_callback_states_from_checkpoint.
  int64_t early_stopping_counter = 0;
  int64_t early_stopping_patience = 0;  // 0: no EarlyStoppingCallback (nothing written)
  // reduce_lr_on_plateau's state (HF keeps it in scheduler.pt); written once it has stepped.
  PlateauState plateau;
  // Made when a run starts fresh and kept by its resumes: save_total_limit rotates only the
  // checkpoints of the same run id, never those an earlier run left in output_dir.
  std::string run_id;
  // The run's settings that a resume must keep (resume_settings.h), as recorded at the start.
  nlohmann::json settings = nlohmann::json::object();
};

// Sets HF's "best_metric" and "best_model_checkpoint" of a trainer_state.json (null when unset).
void put_best(const TrainerState& s, nlohmann::json& trainer_state);

// Writes the trained weights into a dir: a full HF model dir, or a PEFT adapter dir for LoRA.
using ModelWriter = std::function<void(const std::string& dir)>;

// Writes output_dir/checkpoint-<step> atomically (a staging dir: the weights through
// write_model, then the optimizer state and trainer_state.json; renamed when complete, removed on
// failure); then removes checkpoints_to_remove(...) of this run's checkpoints (state.run_id), the
// best being state.best_model_checkpoint. A checkpoint-<step> dir that is not a unillm
// checkpoint is never replaced (IoError). model_only (HF's save_only_model): no optimizer state;
// trainer_state.json says so and load_checkpoint refuses to resume from it.
std::string save_checkpoint(const std::string& output_dir, const ModelWriter& write_model,
                            Optimizer& opt, const TrainerState& state, int64_t save_total_limit,
                            const std::function<void()>& before_commit = {}, bool model_only = false);
// HF's _rotate_checkpoints: of the checkpoint steps (ascending), those save_total_limit removes
// (<= 0: none). The best one (best_step; -1 = none) is never removed: it is moved just before the
// newest, then the oldest beyond the limit go; with a limit of 1 and a best that is not the
// newest, two are kept (so the newest stays resumable).
std::vector<int64_t> checkpoints_to_remove(std::vector<int64_t> steps, int64_t best_step,
                                           int64_t limit);
// Restores optimizer state and returns the trainer state of dir (model weights are loaded by
// the caller from the same dir). Throws IoError naming the file on mismatch or corruption, and
// ConfigError for a save_only_model checkpoint (nothing to resume the optimizer from) and for
// one written by another kind of optimizer.
TrainerState load_checkpoint(const std::string& dir, Optimizer& opt, const ParamArena& arena);
// The unillm checkpoint-N with the highest N in output_dir, or "".
std::string latest_checkpoint(const std::string& output_dir);

}  // namespace unillm::train
