// The two collectives of tensor parallelism, as autograd ops (Megatron's f and g).
#include "nn/tensor_parallel.h"

#include <memory>

#include "autograd/node.h"

namespace unillm::nn {

std::pair<int64_t, int64_t> tp_share(int64_t n, int size, int rank) {
  const int64_t part = n / size;
  return {rank * part, (rank + 1) * part};
}

namespace {

// Sums the gradient over the group (tp_copy's backward), or passes it (tp_reduce's).
class TpNode : public autograd::Node {
 public:
  TpNode(Collective& group, bool sum) : group_(group), sum_(sum) {}
  std::string name() const override { return sum_ ? "TpCopyNode" : "TpReduceNode"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    if (!sum_ || !g[0].defined()) return {g[0]};
    Tensor dx = g[0].clone();
    group_.allreduce_sum(dx);
    return {dx};
  }

 private:
  Collective& group_;
  bool sum_;
};

Tensor pass(const Tensor& x, Collective& group, bool sum_backward, Tensor out) {
  if (autograd::needs_grad({x})) autograd::record(std::make_shared<TpNode>(group, sum_backward), {x}, {&out});
  return out;
}

}  // namespace

Tensor tp_copy(const Tensor& x, Collective& group) {
  // A new handle on the same values: the node's output must be a tensor of its own.
  return pass(x, group, true, x.detach());
}

Tensor tp_reduce(const Tensor& x, Collective& group, ops::OutputUse use) {
  Tensor y = x.contiguous().clone().detach();
  if (use == ops::OutputUse::kValue) group.allreduce_sum(y);
  return pass(x, group, false, y);
}

}  // namespace unillm::nn
