// Tensor parallelism's frozen split weights held as blocks (docs/ARCHITECTURE.md, "Frozen split
// weights held as blocks"): under tensor or context parallelism a frozen weight of a split layer —
// the base of LoRA, a frozen layer of freeze tuning — is only ever multiplied by this process's
// block of it in training, so each process keeps that block alone (nn::FusedLinear::hold_block),
// cut for the group the model splits that layer over (models::CausalLM::split_linears). The
// phases that read weights whole gather them: evaluation and predict one decoder layer at a time
// around its forward (PerLayer), writing a model dir one weight at a time (Streamed), writing
// frozen weights into an adapter dir all of them for its duration (Whole).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dist/process_group.h"
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

  // While the scope is open, each forward through the model's layers gathers a layer's blocked
  // weights whole just before the layer runs and lets them go after (the model's LayerHooks,
  // chained before the hooks it had, which come back when the scope ends): a whole-model
  // forward (evaluation's) holds the blocks and one layer whole. Each gather is a collective over
  // the weight's group, so every process of it must run the same forwards (Run::evaluate's
  // stand-ins). Inside a Whole scope it does nothing. null: nothing to do.
  class PerLayer {
   public:
    PerLayer(TpBlocks* b, models::CausalLM& model);
    ~PerLayer();
    PerLayer(const PerLayer&) = delete;
    PerLayer& operator=(const PerLayer&) = delete;

   private:
    TpBlocks* b_;
    models::CausalLM& model_;
    models::CausalLM::LayerHooks before_;
  };

  // A model dir written by one process (Run::SaveScope), one blocked weight whole at a time: as
  // the writer (rank 0 of `requests`, the tp axis's group) is about to write a tensor of one
  // (read), it broadcasts that weight's index over `requests`, and every process of it gathers
  // the weight (a collective over the weight's own group), letting the one before go. The others
  // serve in the constructor until the writer's end (-1, from its destructor, also when its
  // write failed). Not inside a Whole scope.
  class Streamed {
   public:
    Streamed(TpBlocks* b, dist::ProcessGroup& requests, bool writer);
    ~Streamed();
    Streamed(const Streamed&) = delete;
    Streamed& operator=(const Streamed&) = delete;
    void read(const Tensor& t);

   private:
    void request(int64_t i);
    void hold(int64_t i);
    TpBlocks* b_;
    dist::ProcessGroup& requests_;
    bool writer_;
    int64_t held_ = -1;
  };

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
  void gather_layer(int64_t layer);
  void release_layer(int64_t layer);

  std::vector<nn::FusedLinear*> layers_;
  std::vector<int64_t> layer_of_;  // each one's decoder layer
  int depth_ = 0;                  // open Whole scopes
};

}  // namespace unillm::train
