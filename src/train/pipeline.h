// Pipeline parallelism (docs/ARCHITECTURE.md, "Parallel training"): the decoder's layers split
// into stages over the ranks of a pipeline group, micro-batches run through them in the order of
// pipeline_schedule.h, activations sent forward and their gradients back with point-to-point
// messages. Each rank runs only its stages' layers (the embedding on the first, the final norm
// and the stage's loss on the last). Where it can, a rank holds only those layers' weights
// (ParamShards by owner, Run::setup_owned_layers); elsewhere it holds the whole model, the
// gradients of the layers it does not run stay zero, and summing the gradient arena over the
// processes (as data parallelism does) completes every parameter's gradient.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dist/process_group.h"
#include "models/causal_lm.h"
#include "train/pipeline_schedule.h"

namespace unillm::train {

// The loss head's cost (lm_head GEMM) in decoder layers' worth, by weight count: V·C over a
// layer's attention and MLP projections (stories15M: 9 layers' worth; Llama-2-7B: 0.6).
double loss_head_layers(const models::ModelConfig& c);

// Which rank of a pp-rank pipeline runs each decoder layer (virtual stage g on rank g mod pp).
std::vector<int> pipeline_layer_owners(const models::ModelConfig& model, int pp, int v);

class Pipeline {
 public:
  // group: the ranks of one data-parallel replica's pipeline, rank r holding virtual stages r,
  // r + pp, …; v: virtual_pp_degree. The layers split by pipeline_layers with the model's loss
  // head. ConfigError when they do not split.
  Pipeline(dist::ProcessGroup& group, int v, const models::ModelConfig& model);
  int stages() const { return pp_; }
  int rank() const { return rank_; }
  // Whether this rank holds the last virtual stage (the loss).
  bool holds_loss() const { return rank_ == pp_ - 1; }
  // The layers of every rank and each rank's order of ops over m micro-batches (printed at start).
  std::string describe(int m) const;

  struct Micro {
    models::TrainBatch
        batch;  // dropout_rng unset: each stage's call seeds its own from dropout_seed
    uint64_t dropout_seed = 0;  // the micro-batch's dropout generator (as one process seeds it)
  };
  // What the last stage makes of a micro-batch's final hidden states: `root` (a differentiable
  // tensor: the loss, or per-sequence log-probs or scores) whose backward, seeded with `grad` ×
  // the step's seed, gives the micro-batch's gradient, and the micro-batch's loss for the log.
  struct HeadOut {
    Tensor root;
    std::vector<float> grad;  // d loss / d root, root.numel() values
    double loss = 0;
  };
  // The stage's head (lm_head and cross-entropy, a value head, a preference loss) for micro-batch
  // `micro`, hint: the backward seed (CausalLM::loss's grad_scale_hint).
  using Head = std::function<HeadOut(const Tensor& hidden, int micro, const models::TrainBatch& batch, double hint)>;
  // Forward and backward of this rank's stages for every micro-batch, backward seeded with `seed`
  // (d step loss / d micro-batch loss × the loss scale). Returns each micro-batch's loss on the
  // rank that holds the loss, nothing elsewhere.
  std::vector<double> run(models::CausalLM& model, const std::vector<Micro>& micros, float seed,
                          bool recompute, const Head& head);

  // A forward without gradients of `model` (the policy, its adapters as each batch names them,
  // or a frozen reference copy split the same way) through this rank's stages for every batch,
  // in order; the rank holding the last stage hands each batch's final hidden states to `last`.
  // What the preference stages' references and KTO's KL rows need before run().
  using Last = std::function<void(int batch, const Tensor& hidden)>;
  void forward_only(models::CausalLM& model, const std::vector<models::TrainBatch>& batches, const Last& last);

 private:
  // Messages go through host memory (MPI_Isend): a device plugin's send is a stream operation
  // that waits for its receive, so two neighbours that both send first (1F1B's steady state)
  // would wait for each other without paired group calls, which are not built.
  using Sends = std::vector<std::unique_ptr<dist::Work>>;
  void send_host(Sends& sends, const Tensor& t, int dst, int tag);
  // An [n, hidden] f32 message from src, on `dev`.
  Tensor recv_rows(int64_t n, int64_t hidden, int src, int tag, Device dev);
  // Sends that have completed release their tensors now rather than at the end of the pass.
  static void drop_completed(Sends& sends);

  dist::ProcessGroup& group_;
  int pp_, v_, rank_;
  std::vector<std::pair<int64_t, int64_t>> layers_;  // of each virtual stage
};

}  // namespace unillm::train
