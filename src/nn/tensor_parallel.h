// Tensor parallelism as the model code sees it (Megatron's scheme): a linear layer is
// column-parallel (each rank computes a slice of its output rows: q/k/v, gate/up) or
// row-parallel (each rank multiplies a slice of its input columns and the partial results are
// summed: o_proj, down_proj); the processes of a tensor-parallel group come as a Collective,
// which nn knows only as "sum / gather / reduce-scatter these tensors over the group" (train
// adapts dist's process group).
//
// Every process holds the whole weight (a frozen one may be held as the rank's block alone:
// FusedLinear::hold_block); a rank computes with its block of it (ops::take_rows / take_cols), so the weight's gradient is non-zero only in that block and summing gradients over
// the processes gives one process's. Without sequence parallelism the parameters every rank
// computes whole (norms, the embedding, the lm_head) get the same full gradient on every rank of
// the group (CausalLM::tensor_parallel_tensors lists the others).
//
// Sequence parallelism (Megatron-SP, PaddleNLP's sequence_parallel): between the split regions the
// residual stream is cut by tokens — rank r holds rows [r·N/size, (r+1)·N/size) of the N — so the norms, residual adds, embedding and loss each run on a rank's own rows; a
// column-parallel layer gathers the rows first (backward: reduce-scatter) and a row-parallel one
// reduce-scatters its partial sums (backward: gather). Every gradient is then a rank's own share.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "ops/cross_entropy.h"
#include "ops/linear.h"

namespace unillm::nn {

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // t ← Σ over the group of every rank's t (in place; f32 or f64, contiguous).
  virtual void allreduce_sum(Tensor& t) = 0;
  // out [size · k, …] ← every rank's in [k, …], in rank order.
  virtual void allgather(const Tensor& in, Tensor& out) = 0;
  // out [k, …] ← rows [rank·k, (rank+1)·k) of Σ over the group of every rank's in [size · k, …].
  virtual void reduce_scatter_sum(const Tensor& in, Tensor& out) = 0;
};

// One training call's tensor parallelism: the group (nullptr: none), whether the stream between
// the split regions is cut by tokens, and the call's token count N (sequence parallelism).
struct TensorParallel {
  Collective* group = nullptr;
  bool sequence = false;
  int64_t tokens = 0;
  // Context parallelism (with `sequence`): only the attention splits (by heads); the MLP runs
  // whole on the rank's rows, or beside tensor parallelism over its own group (AttentionInputs::
  // mlp_tp).
  bool attention_only = false;
  // Tensor beside context parallelism: the group's ranks come in runs of `nest` (a context
  // shard's tensor-parallel processes); the rows are cut into size/nest shards first, each shard
  // then over its run, so a run's rows are its shard's (what the MLP's group gathers).
  int nest = 1;
  bool active() const { return group && group->size() > 1; }
  // Sequence parallelism: this rank's rows [begin, end) of the N tokens; rows_of: any rank's.
  std::pair<int64_t, int64_t> rows() const;
  std::pair<int64_t, int64_t> rows_of(int rank) const;
};

enum class TpSplit { kNone, kColumn, kRow };

// Rank r's share [begin, end) of n items split evenly over size ranks (n % size == 0, checked
// by the layers before a run).
std::pair<int64_t, int64_t> tp_share(int64_t n, int size, int rank);

// Before a column-parallel linear: x itself forward; the gradient summed over the group backward
// (each rank's dx covers only its output rows' contribution). With sequence parallelism x is
// the rank's rows and comes out whole (gathered); backward reduce-scatters.
Tensor tp_enter(const Tensor& x, const TensorParallel& tp);
// After a row-parallel linear: the partial products summed over the group forward, the gradient
// passed through backward; with sequence parallelism the sum's rows of this rank only (backward
// gathers). use = kGradOnly (a recompute re-run whose value is discarded): no communication,
// zeros of the result's shape.
Tensor tp_exit(const Tensor& y, const TensorParallel& tp, ops::OutputUse use = ops::OutputUse::kValue);
// Sequence parallelism: this rank's rows of x [N, …] (backward: its rows' gradient, zeros
// elsewhere; no communication).
Tensor sp_rows(const Tensor& x, const TensorParallel& tp);

// The lm_head split by vocabulary rows (PaddleNLP's tensor_parallel_output): rank r multiplies
// rows [r·V/size, (r+1)·V/size) of lm_head [V, C] and the group computes the cross-entropy of every
// token from their logits (ops::vocab_parallel_cross_entropy), so no rank multiplies the whole
// lm_head. x: the final hidden states, whole [N, C] (or this rank's rows under sequence
// parallelism: gathered first); labels [N] shifted, every row. The loss is every row's (each
// rank's the same), or under sequence parallelism this rank's rows' share (their sum over the
// group is the whole); gradients as one process's. grad_scale: the d(loss_sum) backward will get
// (0: unknown), as linear_cross_entropy_eager_grad.
ops::CrossEntropyResult vocab_parallel_loss(const Tensor& x, const Tensor& lm_head, const Tensor& labels,
                                            const TensorParallel& tp, double grad_scale);

}  // namespace unillm::nn
