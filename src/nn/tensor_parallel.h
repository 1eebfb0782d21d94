// Tensor parallelism as the model code sees it (Megatron's scheme): a linear layer is
// column-parallel (each rank computes a slice of its output rows: q/k/v, gate/up) or
// row-parallel (each rank multiplies a slice of its input columns and the partial results are
// summed: o_proj, down_proj); the processes of a tensor-parallel group come as a Collective,
// which nn knows only as "sum this tensor over the group" (train adapts dist's process group).
//
// Every process holds the whole weight; a rank computes with its block of it (ops::take_rows /
// take_cols), so the weight's gradient is non-zero only in that block and summing gradients over
// the processes gives one process's. Parameters every rank computes with whole (norms, the
// embedding, the lm_head) get the same full gradient on every rank of the group (see
// tp_partial_tensors).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "ops/linear.h"

namespace unillm::nn {

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // t ← Σ over the group of every rank's t (in place; f32 or f64, contiguous).
  virtual void allreduce_sum(Tensor& t) = 0;
};

enum class TpSplit { kNone, kColumn, kRow };

// Rank r's share [begin, end) of n items split evenly over size ranks (n % size == 0, checked
// by the layers before a run).
std::pair<int64_t, int64_t> tp_share(int64_t n, int size, int rank);

// Before a column-parallel linear: x itself forward; the gradient summed over the group backward
// (each rank's dx covers only its output rows' contribution).
Tensor tp_copy(const Tensor& x, Collective& group);
// After a row-parallel linear: the partial products summed over the group forward; the gradient
// passed through backward. use = kGradOnly (a recompute re-run whose value is discarded): no
// communication, the zeros pass through.
Tensor tp_reduce(const Tensor& x, Collective& group, ops::OutputUse use = ops::OutputUse::kValue);

}  // namespace unillm::nn
