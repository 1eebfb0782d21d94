// The order in which a pipeline stage runs its micro-batches' forwards and backwards
// (docs/ARCHITECTURE.md, "Parallel training"): 1F1B (PipeDream-flush: a few forwards to fill the
// pipeline, then one forward and one backward alternately, then the remaining backwards) and its
// interleaved form over virtual stages (virtual_pp_degree chunks per rank, Megatron's order).
// Layers are split into pp · v virtual stages; virtual stage g = chunk · pp + rank runs on `rank`.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace unillm::train {

struct PipeOp {
  bool forward = true;
  int micro = 0;  // the micro-batch, 0..m-1 in this data-parallel replica's order
  int chunk = 0;  // this rank's chunk, 0..v-1 (virtual stage chunk · pp + rank)
  bool operator==(const PipeOp&) const = default;
};

// The ops of `rank` (of pp) with v chunks per rank over m micro-batches, in order. With v > 1 and
// m not a multiple of pp (a step short of micro-batches) every forward runs before every backward.
std::vector<PipeOp> pipeline_schedule(int pp, int v, int m, int rank);

// Layers [first, last) of each of the pp · v virtual stages, so that the costliest stage costs
// least: a layer costs 1 and the last stage also runs the loss's head (lm_head and
// cross-entropy), `tail` layers' worth (loss_head_layers in pipeline.h) — Megatron's
// account_for_loss_in_pipeline_split. With tail 0 the layers split evenly, earlier stages taking
// the extra ones. ConfigError when there are fewer layers than virtual stages.
std::vector<std::pair<int64_t, int64_t>> pipeline_layers(int64_t num_layers, int pp, int v, double tail = 0);

// The memory plan's view of a rank (train/memory_plan.h): at the point of its schedule where the
// most activations are held (forwards whose backward has not run), how many micro-batches' worth
// each decoder layer holds — 0 for the layers of other ranks; 1F1B's first stage holds
// min(pp, m) of its layers, the interleaved order's more.
std::vector<int64_t> pipeline_live_per_layer(int64_t num_layers, int pp, int v, int m, int rank, double tail = 0);

// "F0 F1 B0 F2 B1 ..." (with v > 1, "F0.1" is micro-batch 0 on chunk 1).
std::string schedule_text(const std::vector<PipeOp>& ops, int v);

// Runs every rank's schedule as the trainer does — a forward receives its input from the
// previous virtual stage, a backward its gradient from the next, sends never wait — and returns
// "" when every rank finishes, else where they are stuck. (The trainer's schedules are checked
// with it in tests; a schedule that fails here would hang.)
std::string simulate_schedule(int pp, int v, int m);
// The same for given ops of each rank.
std::string simulate_ops(int pp, int v, int m, const std::vector<std::vector<PipeOp>>& ops);

}  // namespace unillm::train
