// Flat per-dtype arenas for trainable parameters and their gradients. Packing moves every
// trainable parameter into one f32 storage and points each parameter's .grad at the matching
// slice of one gradient storage, so the fused optimizer, clipping and (later) ZeRO sharding work
// on contiguous slices. Frozen parameters stay where they are and get no gradient or state.
#pragma once

#include <string>
#include <vector>

#include "nn/module.h"

namespace unillm::train {

struct ArenaSegment {
  std::string name;  // first HF name of the parameter (for logs and checkpoints)
  int64_t offset = 0, numel = 0;  // elements into the arena
  bool decay = true;  // weight decay applies (not for biases and norm weights, as HF)
  std::vector<int64_t> shape;  // the real (possibly fused) tensor's shape
  // Rows of each HF-named part, in order (a fused QKV: q, k, v); they sum to shape[0]. Optimisers
  // whose update depends on a parameter's shape (Adafactor, 8-bit blocks) treat each part as the
  // separate tensor HF has. One entry when the parts are not row ranges (e.g. tied names).
  std::vector<int64_t> part_rows;
  std::vector<std::string> part_names;  // the HF name of each part (Adam-mini partitions by name)
  double lr_scale = 1.0;  // the segment's lr = the scheduled lr × this (LoRA+'s groups)
};

// Arena elements [lo, hi) placed at `at` of another arena (ZeRO-3's pieces, train/param_shards.h).
struct ArenaRun {
  int64_t lo = 0, hi = 0, at = 0;
};
// The parts of `runs` within arena elements [lo, hi), in order, each `at` moved with its start.
std::vector<ArenaRun> clip_runs(const std::vector<ArenaRun>& runs, int64_t lo, int64_t hi);

class ParamArena {
 public:
  // Packs the parameters of m that require grad. bf16/f16 ones are upcast (LLaMA-Factory's
  // upcast of trainable parameters in mixed precision): the module then trains the f32 copy.
  explicit ParamArena(nn::Module& m) : ParamArena(std::vector<nn::Module*>{&m}) {}
  // The trainable parameters of several modules, in order (the model, then a stage's own, such
  // as a reward model's value head).
  // with_grads false: no whole gradient buffer (ZeRO-3, whose gradients live in its units and
  // shard: train/param_shards.h); the parameters get no .grad until they are re-pointed.
  // lazy: the arena gets no memory and nothing is copied (ZeRO-3's policy loaded straight into
  // its shards: the parameters are views of a storage without memory until ParamShards re-points
  // them); the values the parameters held (a norm's ones, a LoRA adapter's initialisation) are
  // kept in initial_values() for the loader to place, the rest read from the checkpoint.
  explicit ParamArena(const std::vector<nn::Module*>& modules, bool with_grads = true, bool lazy = false);
  int64_t numel() const { return numel_; }
  const std::vector<ArenaSegment>& segments() const { return segments_; }
  // For setting per-segment optimiser settings (lr_scale, decay) before the optimiser is built.
  std::vector<ArenaSegment>& mutable_segments() { return segments_; }
  float* params() { return params_.data<float>(); }
  float* grads() { return grads_.data<float>(); }
  const Tensor& param_tensor() const { return params_; }
  const Tensor& grad_tensor() const { return grads_; }
  void zero_grads();
  // True when no parameter is NaN or inf (one pass over the arena: used before saving).
  bool all_finite() const;
  // Elements [lo, hi) as an arena of their own (ZeRO's shard, train/zero.h): its parameters and
  // gradients alias this arena's, and its segments are this arena's clipped to the range and
  // rebased to 0. A segment the range cuts keeps only the elements inside, as a 1-D segment
  // of that many (part_rows left empty): only elementwise optimisers may step a cut arena.
  ParamArena range(int64_t lo, int64_t hi) const;
  // An arena of its own of `numel` elements holding a copy of this arena's runs (gradients zero,
  // elements outside every run zero and in no segment); segments clipped to each run as range()
  // clips them. ZeRO-3's shard: a rank's pieces of every unit, which are several arena ranges.
  // A lazy arena's runs are left zero (ParamShards fills them while loading).
  ParamArena copy_runs(const std::vector<ArenaRun>& runs, int64_t numel) const;
  // Frees the parameter and gradient storage (ZeRO-3: the parameters live in their units and the
  // shard from then on); segments and numel() stay. zero_grads() then does nothing.
  void release_storage();
  // lazy: the values of the parameters that held memory when packed, by arena offset; empty
  // once taken.
  struct Initial {
    int64_t offset = 0;
    Tensor values;
  };
  std::vector<Initial> take_initial_values() { return std::move(initial_); }

 private:
  ParamArena() = default;
  Tensor params_, grads_;  // [numel] f32
  std::vector<ArenaSegment> segments_;
  int64_t numel_ = 0;
  std::vector<Initial> initial_;
};

// HF's rule (Trainer.get_decay_parameter_names): no decay for biases and norm weights.
bool decays(const std::string& hf_name);

}  // namespace unillm::train
