// The collectives of tensor parallelism as autograd ops (Megatron's f and g; with sequence
// parallelism its all-gather / reduce-scatter pair), and the row split of sequence parallelism.
#include "nn/tensor_parallel.h"

#include <algorithm>
#include <memory>

#include "autograd/node.h"
#include "ops/take.h"
#include "ops/vocab_parallel_cross_entropy.h"

namespace unillm::nn {

std::pair<int64_t, int64_t> tp_share(int64_t n, int size, int rank) {
  const int64_t part = n / size;
  return {rank * part, (rank + 1) * part};
}

namespace {

// Rank r's rows [r·N/size, (r+1)·N/size): sizes differ by one at most. The collectives move equal
// blocks, so each rank's rows are padded with zeros to the largest share, ⌈N / size⌉.
int64_t chunk(const TensorParallel& tp) { return (tp.tokens + tp.group->size() - 1) / tp.group->size(); }
// Nested (nest > 1): shard rank / nest of size / nest, then rank % nest's part of it. Still at
// most ⌈N / size⌉ rows a rank (⌈⌈N / s⌉ / nest⌉ = ⌈N / (s · nest)⌉).
std::pair<int64_t, int64_t> rows_of(const TensorParallel& tp, int rank) {
  const int64_t n = tp.tokens, size = tp.group->size(), nest = tp.nest;
  if (nest <= 1) return {rank * n / size, (rank + 1) * n / size};
  const int64_t shards = size / nest, s = rank / nest, r = rank % nest;
  const int64_t lo = s * n / shards, m = (s + 1) * n / shards - lo;
  return {lo + r * m / nest, lo + (r + 1) * m / nest};
}

Shape with_rows(Shape s, int64_t rows) {
  s[0] = rows;
  return s;
}

// Gathers every rank's rows: x [rows of this rank, …] -> [N, …].
Tensor gather_rows(const Tensor& x, const TensorParallel& tp) {
  const int64_t c = chunk(tp);
  Tensor padded = Tensor::zeros(with_rows(x.shape(), c), x.dtype(), x.device());
  if (x.numel() > 0) padded.slice(0, 0, x.size(0)).copy_from(x);
  Tensor all = Tensor::empty(with_rows(x.shape(), c * tp.group->size()), x.dtype(), x.device());
  tp.group->allgather(padded, all);
  Tensor out = Tensor::empty(with_rows(x.shape(), tp.tokens), x.dtype(), x.device());
  for (int r = 0; r < tp.group->size(); ++r) {
    const auto [lo, hi] = rows_of(tp, r);
    if (hi > lo) out.slice(0, lo, hi).copy_from(all.slice(0, r * c, r * c + hi - lo));
  }
  return out;
}

// Sums y [N, …] over the group and keeps this rank's rows.
Tensor reduce_scatter_rows(const Tensor& y, const TensorParallel& tp) {
  const int64_t c = chunk(tp);
  const auto [lo, hi] = tp.rows();
  Tensor padded = Tensor::zeros(with_rows(y.shape(), c * tp.group->size()), y.dtype(), y.device());
  for (int r = 0; r < tp.group->size(); ++r) {
    const auto [rlo, rhi] = rows_of(tp, r);
    if (rhi > rlo) padded.slice(0, r * c, r * c + rhi - rlo).copy_from(y.slice(0, rlo, rhi));
  }
  Tensor mine = Tensor::empty(with_rows(y.shape(), c), y.dtype(), y.device());
  tp.group->reduce_scatter_sum(padded, mine);
  return mine.slice(0, 0, hi - lo).contiguous();
}

enum class Kind { kCopy, kReduce, kGather, kScatter };

// tp_enter / tp_exit's backward: the gradient summed (kCopy), passed (kReduce), reduce-scattered
// (kGather) or gathered (kScatter).
class TpNode : public autograd::Node {
 public:
  TpNode(const TensorParallel& tp, Kind kind) : tp_(tp), kind_(kind) {}
  std::string name() const override { return "TpNode"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    if (!g[0].defined()) return {Tensor()};
    switch (kind_) {
      case Kind::kCopy: {
        Tensor dx = g[0].contiguous().clone();
        tp_.group->allreduce_sum(dx);
        return {dx};
      }
      case Kind::kReduce:
        return {g[0]};
      case Kind::kGather:
        return {reduce_scatter_rows(g[0].contiguous(), tp_)};
      case Kind::kScatter:
        return {gather_rows(g[0].contiguous(), tp_)};
    }
    return {Tensor()};
  }

 private:
  TensorParallel tp_;
  Kind kind_;
};

Tensor record(const Tensor& x, const TensorParallel& tp, Kind kind, Tensor out) {
  if (autograd::needs_grad({x})) autograd::record(std::make_shared<TpNode>(tp, kind), {x}, {&out});
  return out;
}

}  // namespace

std::pair<int64_t, int64_t> TensorParallel::rows() const {
  if (tokens < group->size())
    UNILLM_THROW(ShapeError, "[nn] sequence parallelism over ", group->size(), " processes needs at least as many "
                 "tokens in a micro-batch; this one has ", tokens);
  return rows_of(group->rank());
}

std::pair<int64_t, int64_t> TensorParallel::rows_of(int rank) const { return nn::rows_of(*this, rank); }

Tensor tp_enter(const Tensor& x, const TensorParallel& tp) {
  if (tp.sequence) return record(x, tp, Kind::kGather, gather_rows(x.contiguous(), tp));
  // A new handle on the same values: the node's output must be a tensor of its own.
  return record(x, tp, Kind::kCopy, x.detach());
}

Tensor tp_exit(const Tensor& y, const TensorParallel& tp, ops::OutputUse use) {
  if (tp.sequence) {
    const auto [lo, hi] = tp.rows();
    Tensor out = use == ops::OutputUse::kValue ? reduce_scatter_rows(y.contiguous(), tp)
                                               : Tensor::zeros(with_rows(y.shape(), hi - lo), y.dtype(), y.device());
    return record(y, tp, Kind::kScatter, out);
  }
  Tensor out = y.contiguous().clone().detach();
  if (use == ops::OutputUse::kValue) tp.group->allreduce_sum(out);
  return record(y, tp, Kind::kReduce, out);
}

Tensor sp_rows(const Tensor& x, const TensorParallel& tp) {
  const auto [lo, hi] = tp.rows();
  return ops::take_rows(x, {{lo, hi}});
}

ops::CrossEntropyResult vocab_parallel_loss(const Tensor& x, const Tensor& lm_head, const Tensor& labels,
                                            const TensorParallel& tp, double grad_scale) {
  Collective& g = *tp.group;
  const int64_t vocab = lm_head.size(0), size = g.size(), rank = g.rank();
  const int64_t v0 = rank * vocab / size, v1 = (rank + 1) * vocab / size;
  // The group's per-row max through a gather (the Collective sums), its sums through allreduce.
  ops::GroupReduce reduce = [&g, size](std::vector<double>& v, bool max) {
    const auto m = static_cast<int64_t>(v.size());
    Tensor t = Tensor::empty({m}, DType::f64);
    std::copy(v.begin(), v.end(), t.data<double>());
    if (!max) {
      g.allreduce_sum(t);
      std::copy(t.data<double>(), t.data<double>() + m, v.begin());
      return;
    }
    Tensor all = Tensor::empty({size * m}, DType::f64);
    g.allgather(t, all);
    const double* a = all.data<double>();
    for (int64_t r = 0; r < size; ++r)
      for (int64_t i = 0; i < m; ++i) v[i] = std::max(v[i], a[r * m + i]);
  };
  const auto [lo, hi] = tp.sequence ? tp.rows() : std::pair<int64_t, int64_t>{0, labels.numel()};
  return ops::vocab_parallel_cross_entropy(tp_enter(x, tp), ops::take_rows(lm_head, {{v0, v1}}), labels, v0, vocab,
                                           reduce, grad_scale, lo, hi);
}

}  // namespace unillm::nn
