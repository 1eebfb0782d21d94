// The collectives of expert parallelism as autograd ops (nn/expert_parallel.h).
#include "nn/expert_parallel.h"

#include <algorithm>
#include <memory>
#include <string>

#include "autograd/node.h"

namespace unillm::nn {

namespace {

int64_t width(const std::vector<Tensor>& xs) {
  int64_t c = 0;
  for (const Tensor& x : xs) c += x.size(1);
  return c;
}

// xs [n, c_i] side by side in the first n rows of a zero [rows, Σ c_i].
Tensor pack(const std::vector<Tensor>& xs, int64_t rows, DType dtype, Device device) {
  Tensor out = Tensor::zeros({rows, width(xs)}, dtype, device);
  int64_t at = 0;
  for (const Tensor& x : xs) {
    const int64_t c = x.size(1);
    if (x.defined() && x.size(0) > 0) out.slice(0, 0, x.size(0)).slice(1, at, at + c).copy_from(x);
    at += c;
  }
  return out;
}

// The column blocks of t [r, Σ c] as contiguous tensors.
std::vector<Tensor> unpack(const Tensor& t, const std::vector<int64_t>& cols) {
  std::vector<Tensor> out;
  int64_t at = 0;
  for (int64_t c : cols) {
    out.push_back(t.slice(1, at, at + c).contiguous());
    at += c;
  }
  return out;
}

Tensor allgather_padded(const Tensor& packed, Collective& g) {
  Tensor all = Tensor::empty({packed.size(0) * g.size(), packed.size(1)}, packed.dtype(), packed.device());
  g.allgather(packed, all);
  return all;
}

// The group sums in f32 or f64 (the collectives reduce nothing narrower).
Tensor reduce_scatter_rows(const Tensor& y, int64_t rows, int64_t n, Collective& g) {
  const Tensor s = y.dtype() == DType::f64 ? y.contiguous() : y.to(DType::f32).contiguous();
  Tensor mine = Tensor::empty({rows, s.size(1)}, s.dtype(), s.device());
  g.reduce_scatter_sum(s, mine);
  return mine.slice(0, 0, n).contiguous().to(y.dtype());
}

class GatherNode : public autograd::Node {
 public:
  GatherNode(Collective& g, int64_t rows, int64_t n, std::vector<int64_t> cols, DType dtype, Device device)
      : g_(g), rows_(rows), n_(n), cols_(std::move(cols)), dtype_(dtype), device_(device) {
    num_outputs = static_cast<int>(cols_.size());
  }
  std::string name() const override { return "EpGatherNode"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    // Always one reduce-scatter, whichever gradients arrived (the others are zero).
    std::vector<Tensor> parts;
    for (size_t i = 0; i < cols_.size(); ++i)
      parts.push_back(grads[i].defined() ? grads[i].contiguous()
                                         : Tensor::zeros({rows_ * g_.size(), cols_[i]}, dtype_, device_));
    const Tensor sum = reduce_scatter_rows(pack(parts, rows_ * g_.size(), dtype_, device_), rows_, n_, g_);
    return unpack(sum, cols_);
  }

 private:
  Collective& g_;
  int64_t rows_, n_;
  std::vector<int64_t> cols_;
  DType dtype_;
  Device device_;
};

class ScatterNode : public autograd::Node {
 public:
  ScatterNode(Collective& g, int64_t rows, std::vector<Tensor> ties) : g_(g), rows_(rows) {
    for (const Tensor& t : ties) tie_shapes_.push_back({t.shape(), t.dtype(), t.device()});
  }
  std::string name() const override { return "EpScatterNode"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    std::vector<Tensor> out;
    const Tensor& g = grads[0];
    out.push_back(g.defined() ? allgather_padded(pack({g.contiguous()}, rows_, g.dtype(), g.device()), g_)
                              : Tensor());
    for (const auto& [shape, dtype, device] : tie_shapes_) out.push_back(Tensor::zeros(shape, dtype, device));
    return out;
  }

 private:
  Collective& g_;
  int64_t rows_;
  std::vector<std::tuple<Shape, DType, Device>> tie_shapes_;
};

}  // namespace

std::vector<int64_t> ep_counts(int64_t n, Collective& group) {
  Tensor mine = Tensor::empty({1}, DType::f64);
  mine.data<double>()[0] = static_cast<double>(n);
  Tensor all = Tensor::empty({group.size()}, DType::f64);
  group.allgather(mine, all);
  std::vector<int64_t> out(static_cast<size_t>(group.size()));
  for (int r = 0; r < group.size(); ++r) out[static_cast<size_t>(r)] = static_cast<int64_t>(all.data<double>()[r]);
  return out;
}

std::vector<Tensor> ep_gather(const std::vector<Tensor>& xs, int64_t rows, Collective& group) {
  const int64_t n = xs.at(0).size(0);
  if (n > rows) UNILLM_THROW(ShapeError, "[nn] expert parallelism: ", n, " rows exceed the group's ", rows);
  std::vector<int64_t> cols;
  for (const Tensor& x : xs) {
    if (x.ndim() != 2 || x.size(0) != n || x.dtype() != xs[0].dtype())
      UNILLM_THROW(ShapeError, "[nn] ep_gather takes [n, c] tensors of one dtype");
    cols.push_back(x.size(1));
  }
  const DType dtype = xs[0].dtype();
  const Device device = xs[0].device();
  std::vector<Tensor> out = unpack(allgather_padded(pack(xs, rows, dtype, device), group), cols);
  if (autograd::needs_grad(xs)) {
    std::vector<Tensor*> outs;
    for (Tensor& t : out) outs.push_back(&t);
    autograd::record(std::make_shared<GatherNode>(group, rows, n, cols, dtype, device), xs, outs);
  }
  return out;
}

Tensor ep_gather_ints(const Tensor& ids, int64_t rows, Collective& group) {
  return allgather_padded(pack({ids.contiguous()}, rows, ids.dtype(), ids.device()), group);
}

Tensor ep_scatter(const Tensor& y, int64_t rows, int64_t n, Collective& group, const std::vector<Tensor>& ties) {
  if (y.ndim() != 2 || y.size(0) != rows * group.size())
    UNILLM_THROW(ShapeError, "[nn] expert parallelism: ", y.size(0), " rows are not ", group.size(), " × ", rows);
  Tensor out = reduce_scatter_rows(y, rows, n, group);
  std::vector<Tensor> inputs{y};
  inputs.insert(inputs.end(), ties.begin(), ties.end());
  if (autograd::needs_grad(inputs)) autograd::record(std::make_shared<ScatterNode>(group, rows, ties), inputs, {&out});
  return out;
}

std::pair<int64_t, int64_t> ep_experts(int64_t experts, const Collective& group) {
  const int64_t part = experts / group.size();
  return {group.rank() * part, (group.rank() + 1) * part};
}

}  // namespace unillm::nn
