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
    Device device;
    for (const Tensor& gp : g)
      if (gp.defined()) device = gp.device();
    Tensor dx = Tensor::zeros(in_shape_, dtype_, device);
    const int last = static_cast<int>(in_shape_.size()) - 1;
    int64_t col = 0;
    for (size_t p = 0; p < sizes_.size(); ++p) {
      // Each part's gradient into its columns (a row-strided copy, on the gradients' device).
      if (g[p].defined()) dx.slice(last, col, col + sizes_[p]).copy_from(g[p]);
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
