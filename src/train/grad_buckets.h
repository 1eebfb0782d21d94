// Data parallelism's gradient reduction in buckets started during backward (docs/ARCHITECTURE.md,
// "Parallel training"): the gradient arena is cut into buckets of consecutive decoder layers (up
// to ddp_bucket_cap_mb, torch DDP's rule) plus what lies outside the layers (embedding, final
// norm, lm_head, a value head). On a step's last micro-batch, a layer's bucket is all-reduced
// (non-blocking) as soon as backward has left its lowest layer (CausalLM::set_layer_backward_hook),
// while backward goes on through the layers below; finish() starts the rest and waits for all.
// Buckets start in one fixed order on every process (top layers first, then the rest), as MPI
// requires of collectives; a bucket whose layer is not reported (a frozen first layer) starts in
// finish(), in its place. The sums are the whole arena's allreduce, element for element.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dist/process_group.h"
#include "train/arena.h"

namespace unillm::train {

// The decoder layer a parameter belongs to ("model.layers.7.mlp.down_proj.weight" → 7, also under
// PEFT's "base_model.model." prefix); -1 outside the layers.
int64_t layer_of(const std::string& name);

class GradBuckets {
 public:
  GradBuckets(ParamArena& arena, dist::ProcessGroup& group, double cap_bytes);
  // "3 buckets (2 over layers, ≤ 25 MB) ..." for the start of the run.
  std::string describe() const;
  int64_t size() const { return static_cast<int64_t>(buckets_.size()); }
  // The arena ranges [lo, hi) of the buckets, in the order they are started.
  std::vector<std::pair<int64_t, int64_t>> ranges() const;

  // The step's last micro-batch begins: layer_done starts buckets from now on.
  void arm();
  // Backward has left `layer` (the model's hook): starts the buckets that are complete, in order,
  // and lets the ones in flight progress.
  void layer_done(int64_t layer);
  // Starts every bucket not started yet, in order, and waits for all; disarms.
  void finish();
  // Called with a bucket's arena range [lo, hi) just before its allreduce starts, when its
  // gradients are complete (tensor parallelism drops there the gradients its rank does not count).
  void set_before_start(std::function<void(int64_t, int64_t)> fn) { before_start_ = std::move(fn); }

 private:
  struct Bucket {
    int64_t lo = 0, hi = 0;
    int64_t lowest_layer = -1;  // complete once backward has left it; -1: only in finish()
  };
  void start_ready();

  ParamArena& arena_;
  dist::ProcessGroup& group_;
  double cap_bytes_;
  std::vector<Bucket> buckets_;  // in the order they are started
  std::vector<bool> ready_;
  std::vector<std::unique_ptr<dist::Work>> works_;
  size_t next_ = 0;  // buckets_[0, next_) are started
  bool armed_ = false;
  std::string layout_note_;  // why there is one bucket, when the layers could not be cut
  std::function<void(int64_t, int64_t)> before_start_;
};

}  // namespace unillm::train
