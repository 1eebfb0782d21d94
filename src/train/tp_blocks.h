// Tensor parallelism's frozen split weights held as blocks (docs/ARCHITECTURE.md, "Frozen split
// weights held as blocks"): under tensor or context parallelism a frozen weight of a split layer —
// the base of LoRA, a frozen layer of freeze tuning — is only ever multiplied by this process's
// block of it in training, so each process keeps that block alone (nn::FusedLinear::hold_block),
// cut for the group the model splits that layer over (models::CausalLM::split_linears). The
// phases that read weights whole (evaluation, predict, saving frozen weights) gather them for
// their duration (Whole) and let them go after.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/causal_lm.h"
#include "nn/linear.h"

namespace unillm::train {

class TpBlocks {
 public:
  // Every one of `split` with a frozen (dense) weight, cut to its block for its group.
  explicit TpBlocks(const std::vector<models::CausalLM::SplitLinear>& split);
  TpBlocks(const TpBlocks&) = delete;
  TpBlocks& operator=(const TpBlocks&) = delete;
  bool empty() const { return layers_.empty(); }
  int64_t layers() const { return static_cast<int64_t>(layers_.size()); }
  // Bytes of those weights this process keeps (its blocks), and the whole weights'.
  int64_t kept_bytes() const;
  int64_t whole_bytes() const;

  // Every blocked weight gathered whole (a collective over the group) for the scope; when it
  // ends each is cut to its block again (from whatever the scope left in it) and released. Nests.
  // null: nothing to do.
  class Whole {
   public:
    explicit Whole(TpBlocks* b);
    ~Whole();
    Whole(const Whole&) = delete;
    Whole& operator=(const Whole&) = delete;

   private:
    TpBlocks* b_;
  };

 private:
  std::vector<nn::FusedLinear*> layers_;
  int depth_ = 0;  // open Whole scopes
};

}  // namespace unillm::train
