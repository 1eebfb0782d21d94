// BAdam's ratio mode (badam_mode: ratio): the `badam` package's BlockOptimizerRatio as
// LLaMA-Factory builds it. Every trainable tensor but the embeddings and lm_head keeps a sparse
// mask of int(numel × update_ratio) entries; the gradient is cut to the mask before clipping,
// and Adam (no weight decay) updates the kept entries only, with state for those entries alone.
// Masks move every switch_every steps, when the Adam state restarts.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "train/optimizer.h"

namespace unillm::train {

// True for the tensors BlockOptimizerRatio freezes: the first parameter whose name contains
// "embed" and the first whose name contains "lm_head", in HF order (`names`). A tied lm_head is
// the embedding. Returns one flag per name.
std::vector<bool> badam_ratio_frozen(const std::vector<std::string>& names);

class BAdamRatio : public Optimizer {
 public:
  // The arena holds the model's parameters in HF order less the embeddings and lm_head; its
  // parts are the package's parameters. ConfigError for a ratio outside (1e-6, 1].
  BAdamRatio(ParamArena& arena, const OptimizerConfig& c);
  const char* kind() const override { return "badam_ratio"; }
  // The package's sparse_update_hook on every part: the gradient outside the part's mask
  // becomes 0; the kept entries of a tensor under 100 elements (every entry at ratio 1) get
  // + 1e-9 per backward pass.
  // Called once per step before clipping (again after a step the loss scaler skipped: the
  // trainer zeroed those gradients); step() calls it when nobody did since the last step.
  void prepare_grads() override;
  // Sparse Adam on the kept entries (step size lr·√bc2/bc1, denominator √v + eps), then the
  // state reset when steps() reaches a multiple of switch_every.
  void step(double lr) override;
  // exp_avg, exp_avg_sq: [Σ kept entries] f32, each part's entries in ascending index order.
  // The masks follow from steps() and the seeds, so nothing else is saved.
  StateTensors state() override { return {{"exp_avg", &m_}, {"exp_avg_sq", &v_}}; }
  // Says what trains (finetune.cpp already left the embeddings and lm_head out of the arena).
  void attach(const std::vector<nn::Module*>& modules,
              const std::function<void(const std::string&)>& say) override;

  // Part i's kept element indices (ascending, into the part's row-major elements) at step
  // `step` (0-based count of finished steps). Valid until a call for another round.
  const std::vector<int64_t>& mask_of(size_t part, int64_t step);
  // The package's per-parameter seed of part i (torch.randint(0, 1000) in HF order).
  int64_t seed_of(size_t part) const { return seeds_.at(part); }
  size_t num_parts() const { return parts_.size(); }

 private:
  std::vector<int64_t> make_mask(size_t part, int64_t moves) const;
  int64_t kept(size_t part) const;

  OptimizerConfig c_;
  std::vector<ArenaPart> parts_;
  std::vector<int64_t> seeds_;      // per part
  std::vector<size_t> owner_;       // per part: the part whose mask its shape shares
  std::vector<int64_t> state_off_;  // per part: its entries in m_ / v_
  // This round's masks by (the part they are made from, offset moves).
  std::map<std::pair<size_t, int64_t>, std::vector<int64_t>> cache_;
  int64_t cache_round_ = -1;
  Tensor m_, v_;           // [Σ kept] f32, on the host
  bool prepared_ = false;  // prepare_grads() ran since the last step()
};

}  // namespace unillm::train
