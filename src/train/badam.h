// BAdam's layer mode (use_badam): block coordinate descent with AdamW, one decoder layer
// ("model.layers.N.") trainable at a time, as the `badam` package's BlockOptimizer does it when
// LLaMA-Factory builds it. Only the active layer requires grad, so backward computes no other
// weight gradient and the clip norm covers that layer alone; AdamW's state (and its bias
// correction) restarts at each switch and is held for one layer only.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/rng.h"
#include "train/optimizer.h"

namespace unillm::train {

// The decoder-layer prefix of an HF name: "model.layers.3." for "model.layers.3.mlp.up_proj.weight"
// (the last "layers.<digits>." in it); "" when the name lies outside every layer.
std::string layer_prefix(const std::string& hf_name);

class BAdam : public Optimizer {
 public:
  // The blocks are the layer prefixes of the arena's segments in arena order; segments outside
  // every layer never update (BAdam leaves embeddings, norm and lm_head alone). ConfigError when
  // there is no layer or start_block is out of range.
  BAdam(ParamArena& arena, const OptimizerConfig& c);
  const char* kind() const override { return "badam"; }
  // AdamW on the active layer's segments (torch's default weight_decay 0.01 on each, see
  // badam.cpp), then the switch when (steps() + 1) is a multiple of switch_interval.
  void step(double lr) override;
  // exp_avg, exp_avg_sq ([largest layer] f32) and "badam" (i64: active block, AdamW steps since
  // the switch, the random mode's queue and RNG).
  StateTensors state() override {
    return {{"exp_avg", &m_}, {"exp_avg_sq", &v_}, {"badam", &meta_}};
  }
  // Sets requires_grad: true on the active layer's parameters, false on every other trainable one.
  void attach(const std::vector<nn::Module*>& modules,
              const std::function<void(const std::string&)>& say) override;

  int64_t num_blocks() const { return static_cast<int64_t>(prefixes_.size()); }
  int64_t active_block() const;
  const std::string& block_prefix(int64_t b) const { return prefixes_.at(static_cast<size_t>(b)); }
  // The block of arena segment i, or -1 outside every layer.
  int64_t block_of_segment(size_t i) const { return seg_block_.at(i); }

 private:
  int64_t& meta(int64_t i) { return meta_.data<int64_t>()[i]; }
  void switch_block();  // to the next block by the mode; resets AdamW's state
  void apply_trainable();
  void describe_active() const;

  OptimizerConfig c_;
  std::vector<std::string> prefixes_;
  std::vector<int64_t> seg_block_;               // per arena segment
  std::vector<std::vector<size_t>> block_segs_;  // segments of each block
  Tensor m_, v_;                                 // [largest block] f32, on the arena's device
  Tensor meta_;                                  // [kMetaSize + blocks] i64, CPU
  std::vector<Tensor> handles_;  // per segment: the module's parameter (shares autograd state)
  std::function<void(const std::string&)> say_;
};

}  // namespace unillm::train
