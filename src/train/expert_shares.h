// Expert parallelism's frozen experts held by their runners only (docs/ARCHITECTURE.md, "Frozen
// split weights held as blocks"): in training a process runs only its share of each sparse
// layer's experts (nn/expert_parallel.h), so the frozen weights of the others' experts — LoRA's
// base — hold no memory on it (nn::FusedLinear::hold_nothing). The phases that read every
// expert (evaluation, predict, saving frozen weights) have each one broadcast by its runner for
// their duration (Whole) and let go after.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "dist/process_group.h"
#include "nn/linear.h"

namespace unillm::train {

class ExpertShares {
 public:
  // The frozen weights of `model`'s routed experts ("….mlp.experts.<e>."), expert e run by rank
  // e / (experts / size) of `group` (nn::ep_experts); the other ranks' are let go here.
  ExpertShares(nn::Module& model, int64_t experts, dist::ProcessGroup& group);
  // Each routed expert's linear in `model` with the rank of a group of `size` that runs it (the
  // rule above; what a load that drops the others' as it reads them needs before any group exists).
  static std::vector<std::pair<nn::FusedLinear*, int>> runners(nn::Module& model, int64_t experts,
                                                               int size);
  ExpertShares(const ExpertShares&) = delete;
  ExpertShares& operator=(const ExpertShares&) = delete;
  bool empty() const { return foreign_ == 0; }
  // Bytes of the experts' frozen weights this process keeps (its own experts'), and all of them.
  int64_t kept_bytes() const;
  int64_t whole_bytes() const;

  // Every expert's frozen weights here for the scope (one broadcast per weight from its runner, a
  // collective over the group), the others' let go when it ends. Nests. null: nothing to do.
  class Whole {
   public:
    explicit Whole(ExpertShares* s);
    ~Whole();
    Whole(const Whole&) = delete;
    Whole& operator=(const Whole&) = delete;

   private:
    ExpertShares* s_;
  };

 private:
  struct Held {
    nn::FusedLinear* linear;
    int runner;  // the group rank that runs the expert
  };
  std::vector<Held> held_;  // every expert's frozen linear, in model order (the same on every rank)
  dist::ProcessGroup& group_;
  int64_t foreign_ = 0;  // of them, the others' (held as nothing)
  int depth_ = 0;        // open Whole scopes
};

}  // namespace unillm::train
