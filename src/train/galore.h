// GaLore (galore_torch's GaLoreAdamW as LLaMA-Factory's _create_galore_optimizer builds it): the
// gradient of each targeted HF-named matrix is projected into rank r by the top singular vectors
// of the gradient, refreshed every update_interval steps (train/projector.h); Adam's moments live
// in that space; the normalised update goes back up, times scale. Every other tensor takes the
// same AdamW without projection. Weight decay (transformers' old AdamW) follows the update.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "train/low_rank.h"
#include "train/optimizer.h"
#include "train/projector.h"

namespace unillm::train {

// Where each HF-named part of the arena keeps its state: its moments at state_offset into the
// moment tensors (full size, or the low-rank size of a target), a target's bases at left_offset /
// right_offset into the basis tensors. Shared with APOLLO.
struct LowRankSlot {
  ArenaPart part;
  bool target = false;
  ProjShape shape;  // targets only
  int64_t state_offset = 0, left_offset = 0, right_offset = 0;
  int64_t target_index = 0;  // 0, 1, … over targets
  int64_t part_index = 0;    // 0, 1, … over all parts
};
struct LowRankLayout {
  std::vector<LowRankSlot> slots;
  int64_t moments = 0, left = 0, right = 0, targets = 0;
};
// Throws ConfigError when `s.target` names no trainable matrix of the arena (`what`: the key).
LowRankLayout low_rank_layout(const ParamArena& arena, const LowRankSettings& s, bool svd,
                              const char* what);
// The start-up line: "GaLore: rank 16 (std), refreshed every 200 steps, scale 2 on 154 of 291
// tensors (the rest: AdamW)".
std::string describe_low_rank(const char* name, const LowRankLayout& l, const LowRankSettings& s);

// One step (number step + 1) of GaLore or APOLLO over the arena: each part's AdamW scalars (lr ×
// its segment's lr_scale; weight decay on targets and on segments with decay, as LLaMA-Factory's
// groups), galore_torch's plain AdamW for the non-targets (moments m, v at state_offset), and
// `target` for the projected ones. Parameters are written back to the arena.
using LowRankTargetStep = std::function<void(const LowRankSlot&, float* p, const float* g, const AdamScalars&)>;
void low_rank_step(ParamArena& arena, const LowRankLayout& layout, const OptimizerConfig& c, int64_t step,
                   double lr, Tensor& m, Tensor& v, const LowRankTargetStep& target);

class Galore : public Optimizer {
 public:
  Galore(ParamArena& arena, const OptimizerConfig& c);
  const char* kind() const override { return "galore"; }
  // Says what is projected (LLaMA-Factory logs its GaLore args at start).
  void attach(const std::vector<nn::Module*>& modules,
              const std::function<void(const std::string&)>& say) override;
  void step(double lr) override;
  // exp_avg / exp_avg_sq (every part's moments, concatenated in arena order: low-rank ones for
  // targets), proj_left / proj_right (the targets' bases). All f32.
  StateTensors state() override;
  const LowRankLayout& layout() const { return layout_; }

 private:
  void step_target(const LowRankSlot& s, float* p, const float* g, const AdamScalars& k);

  OptimizerConfig c_;
  LowRankLayout layout_;
  Tensor m_, v_, left_, right_;
};

// State bytes of GaLore / APOLLO before the arena exists (the memory plan): counted as AdamW's
// (an upper bound; their low-rank moments and bases are smaller).
int64_t planned_low_rank_state_bytes(int64_t trainable);

}  // namespace unillm::train
