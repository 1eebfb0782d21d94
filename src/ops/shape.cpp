// reshape and split_last with their backward nodes.
#include "ops/shape.h"

#include <cstring>

#include "autograd/node.h"

namespace unillm::ops {

namespace {

class ReshapeNode : public autograd::Node {
 public:
  explicit ReshapeNode(Shape in_shape) : in_shape_(std::move(in_shape)) {}
  std::string name() const override { return "reshape"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    return {g[0].defined() ? g[0].contiguous().view(in_shape_) : Tensor()};
  }

 private:
  Shape in_shape_;
};

class SplitNode : public autograd::Node {
 public:
  SplitNode(Shape in_shape, std::vector<int64_t> sizes, DType dtype)
      : in_shape_(std::move(in_shape)), sizes_(std::move(sizes)), dtype_(dtype) {}
  std::string name() const override { return "split_last"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    Tensor dx = Tensor::zeros(in_shape_, dtype_);
    const int64_t s = in_shape_.back(), rows = dx.numel() / std::max<int64_t>(s, 1);
    const size_t es = dtype_size(dtype_);
    auto* dst = static_cast<char*>(dx.raw_data());
    int64_t col = 0;
    for (size_t p = 0; p < sizes_.size(); ++p) {
      if (g[p].defined()) {
        Tensor gp = g[p].to(dtype_).contiguous();
        auto* src = static_cast<const char*>(gp.raw_data());
        for (int64_t r = 0; r < rows; ++r)
          std::memcpy(dst + (r * s + col) * es, src + r * sizes_[p] * es, sizes_[p] * es);
      }
      col += sizes_[p];
    }
    return {dx};
  }

 private:
  Shape in_shape_;
  std::vector<int64_t> sizes_;
  DType dtype_;
};

}  // namespace

Tensor reshape(const Tensor& x, const Shape& shape) {
  Tensor out = x.contiguous().view(shape);
  if (autograd::needs_grad({x})) autograd::record(std::make_shared<ReshapeNode>(x.shape()), {x}, {&out});
  return out;
}

std::vector<Tensor> split_last(const Tensor& x, const std::vector<int64_t>& sizes) {
  int64_t total = 0;
  for (auto s : sizes) total += s;
  if (x.ndim() < 1 || x.size(-1) != total)
    UNILLM_THROW(ShapeError, "[split_last] parts sum to ", total, " but x has shape ", shape_str(x.shape()));
  std::vector<Tensor> parts;
  int64_t col = 0;
  for (auto s : sizes) {
    parts.push_back(x.slice(x.ndim() - 1, col, col + s).contiguous());
    if (parts.back().same_view(x)) parts.back() = x.clone();  // one part = x: keep outputs distinct
    col += s;
  }
  if (autograd::needs_grad({x})) {
    std::vector<Tensor*> outs;
    for (auto& p : parts) outs.push_back(&p);
    autograd::record(std::make_shared<SplitNode>(x.shape(), sizes, x.dtype()), {x}, outs);
  }
  return parts;
}

}  // namespace unillm::ops
