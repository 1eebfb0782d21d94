// ZeRO stages 1, 2 and 3 over the flat parameter arena (docs/ARCHITECTURE.md, "Parallel training"):
// the arena is cut into one contiguous range per data-parallel rank, cutting across parameters
// (the arena is partitioned, not the parameter list). Each rank keeps the optimiser state of its
// range only and steps only it; the updated parameters are then all-gathered. Stage 1 sums the
// gradients with one allreduce as plain data parallelism does; stage 2 reduce-scatters them, so a
// rank holds the summed gradients of its own range, and the clip norm is an allreduce of the
// ranges' squared norms. Checkpoints stay unified: the state is gathered into whole-arena
// tensors named as one process names them, and a resume under any number of ranks takes its
// range of them. Stage 3 shards by units instead of one range (ZeroPieces, train/param_shards.h).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "dist/process_group.h"
#include "train/optimizer.h"

namespace unillm::train {

// Rank r's elements of an n-element arena over `world` ranks: [r·s, (r+1)·s) ∩ [0, n) with
// s = ⌈n / world⌉ (the last ranks may hold fewer, or none).
std::pair<int64_t, int64_t> zero_range(int64_t n, int world, int rank);

// The optimiser kinds whose update is elementwise, so a range may cut a parameter: the ones
// ZeRO shards (AdamW, SGD).
bool zero_shardable(const std::string& kind);

// ZeRO-3's shard layout (train/param_shards.h): each rank's pieces of the arena, as runs placed in
// a shard of per_rank elements (the same on every rank).
struct ZeroPieces {
  std::vector<std::vector<ArenaRun>> runs_by_rank;
  int64_t per_rank = 0;
};

class ZeroOptimizer : public Optimizer {
 public:
  using MakeInner = std::function<std::unique_ptr<Optimizer>(ParamArena& shard)>;
  // Stage 3: the inner optimiser steps a copy of this rank's pieces (ParamArena::copy_runs); the
  // gradients reach the shard during backward (ParamShards reduce-scatters each unit), so
  // reduce_gradients() does nothing, and step() gathers nothing (the units gather just in time).
  // before_state runs once the shard holds this rank's pieces and before the inner optimiser
  // makes its state: ParamShards::shard releases the whole arena there, so the arena and the
  // state never live at once. `replicas` as below: reduce_gradients() then sums the shard's
  // gradients across the sharding groups. split_state (with replicas): the replicas also split
  // the shard's optimizer state and step by range, ZeRO-1 over them — each steps its range of
  // the shard, then the ranges are all-gathered over the replicas (pipeline stages, which hold
  // the same pieces of every layer but run only their own).
  ZeroOptimizer(ParamArena& arena, dist::ProcessGroup& group, ZeroPieces pieces, const MakeInner& make_inner,
                const std::function<void(ParamArena& shard)>& before_state = {},
                dist::ProcessGroup* replicas = nullptr, bool split_state = false);
  // stage 1 or 2; make_inner builds the real optimiser over this rank's range of `arena`, cut
  // over the ranks of `group`. `replicas` (PaddleNLP's sharding_parallel_degree below the process
  // count: sharding groups replicated across dp) joins the ranks holding the same range in the
  // other sharding groups; null when one group spans every process.
  ZeroOptimizer(ParamArena& arena, dist::ProcessGroup& group, int stage, const MakeInner& make_inner,
                dist::ProcessGroup* replicas = nullptr);
  const char* kind() const override { return inner_->kind(); }
  // The inner optimiser steps this rank's range; then every rank's range is all-gathered.
  void step(double lr) override;
  // This rank's state (its range, or its stage-3 pieces).
  StateTensors state() override;
  // Checkpoints hold the whole-arena state tensors. write_state (the group's rank 0) writes them
  // a window of kStateWindow elements at a time, assembled from every rank's elements in it,
  // which the others send with send_state() (ranks of the other sharding groups, holding the same
  // parts, do nothing); no rank holds more than one window besides its own part. read_state
  // copies only this rank's part out of the mapped file.
  static constexpr int64_t kStateWindow = int64_t{1} << 22;  // 16 MiB of f32
  void write_state(const std::string& path) override;
  void send_state() override;
  void read_state(const io::SafetensorsFile& f, const std::string& where) override;

  int stage() const { return stage_; }
  // Sums the gradients over every process: stage 1 all of them (allreduce), stage 2 only this
  // rank's range (reduce-scatter in the sharding group, then an allreduce of the range over the
  // replicas; the rest of the arena's gradients are left partial and unused), stage 3 only the
  // replicas' sum of the shard (each unit was reduce-scattered in its group during backward; with
  // split state a reduce-scatter over the replicas, each keeping the sum of the range it steps).
  // summed: the whole arena's gradients were already summed over the group (the trainer's
  // gradient buckets, started during backward; stage 1 without replicas only): nothing is left.
  void reduce_gradients(bool summed = false);
  // Whether the trainer's gradient buckets can do this optimizer's reduction (stage 1, one
  // sharding group over every process).
  bool buckets_reduce() const { return stage_ == 1 && !replicas_; }
  // The arena whose gradients are complete after reduce_gradients(): the whole one (stage 1),
  // this rank's range (stage 2), its shard (stage 3) or its replica's range of it (split state).
  ParamArena& reduced();
  // The global gradient norm and clipping (clip_grad_norm's rule); in stage 2 each rank's range
  // is squared and summed, one allreduce adds the ranges (two with split state: the group's, then
  // the replicas'), and each rank scales its own.
  double clip_grad_norm(double max_norm);
  // True on every rank when all ranks' reduced gradients are finite (an fp16 step is skipped
  // by all or none).
  bool all_ranks(bool mine);
  // Stage 3: the shard the units gather from and reduce into, and its gradients zeroed (the whole
  // arena's storage is released).
  ParamArena& shard() { return shard_; }
  void zero_grads();

 private:
  // Stages 1 and 2: this rank's range -> every rank's, copied back into `whole` (the arena), per
  // rank `per` elements over `g` (stage 3's split state: the replicas' ranges of the shard).
  void gather_into(const Tensor& mine, Tensor& whole, dist::ProcessGroup& g, int64_t per);
  // Sums g over grp's ranks, rank q's range being [q·per, (q+1)·per); this rank's sums go into
  // `mine` (its range's first mine.numel() elements), each window also summed over `then`.
  void scatter_sum(const Tensor& g, Tensor& mine, dist::ProcessGroup& grp, int64_t per, dist::ProcessGroup* then);
  // The optimizer state of this rank's whole part (split_state: all-gathered over the replicas,
  // a collective; otherwise the inner optimizer's own tensors).
  StateTensors part_state();
  // The step's allgather and stage 2's reduce-scatter move kCollectiveWindow elements of each
  // rank's range per call: whole-arena buffers would add 1 + 1/W arenas to every step's peak.
  static constexpr int64_t kCollectiveWindow = int64_t{1} << 20;
  // Rank q's part of the arena: its range, or its stage-3 pieces, each run `at` into its part.
  std::vector<ArenaRun> runs_of(int q) const;
  // This rank's part of a whole-arena tensor.
  void take_part(const Tensor& whole, Tensor& part) const;

  dist::ProcessGroup& group_;
  dist::ProcessGroup* replicas_;
  int stage_;
  int64_t lo_ = 0, hi_ = 0, per_rank_ = 0;
  ParamArena shard_;
  std::unique_ptr<Optimizer> inner_;
  ZeroPieces pieces_;  // stage 3
  std::optional<ParamArena> split_;  // split_state: this replica's range [split_lo_, ..) of the shard
  int64_t split_lo_ = 0, split_per_ = 0;
  std::vector<Tensor> part_state_;  // part_state()'s gathered tensors, alive while it is in use
};

}  // namespace unillm::train
