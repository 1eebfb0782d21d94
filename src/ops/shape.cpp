// reshape and split_last with their backward nodes.
#include "ops/shape.h"

#include <algorithm>
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

class SplitRowsNode : public autograd::Node {
 public:
  SplitRowsNode(Shape in_shape, std::vector<int64_t> sizes, DType dtype)
      : in_shape_(std::move(in_shape)), sizes_(std::move(sizes)), dtype_(dtype) {}
  std::string name() const override { return "split_rows"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    Device device;
    for (const Tensor& gp : g)
      if (gp.defined()) device = gp.device();
    Tensor dx = Tensor::empty(in_shape_, dtype_, device);
    int64_t row = 0;
    for (size_t p = 0; p < sizes_.size(); ++p) {
      Tensor block = dx.slice(0, row, row + sizes_[p]);
      if (g[p].defined())
        block.copy_from(g[p]);
      else
        block.copy_from(Tensor::zeros(block.shape(), dtype_, device));
      row += sizes_[p];
    }
    return {dx};
  }

 private:
  Shape in_shape_;
  std::vector<int64_t> sizes_;
  DType dtype_;
};

class ConcatRowsNode : public autograd::Node {
 public:
  explicit ConcatRowsNode(std::vector<int64_t> sizes) : sizes_(std::move(sizes)) {}
  std::string name() const override { return "concat_rows"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    std::vector<Tensor> out;
    int64_t row = 0;
    for (int64_t s : sizes_) {
      out.push_back(g[0].slice(0, row, row + s).contiguous());
      row += s;
    }
    return out;
  }

 private:
  std::vector<int64_t> sizes_;
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

std::vector<Tensor> split_rows(const Tensor& x, const std::vector<int64_t>& sizes) {
  int64_t total = 0;
  for (auto s : sizes) total += s;
  if (x.ndim() < 1 || x.size(0) != total)
    UNILLM_THROW(ShapeError, "[split_rows] blocks sum to ", total, " rows but x has shape ", shape_str(x.shape()));
  std::vector<Tensor> parts;
  int64_t row = 0;
  for (auto s : sizes) {
    parts.push_back(x.slice(0, row, row + s).contiguous());
    if (parts.back().same_view(x)) parts.back() = x.clone();  // one block = x: keep outputs distinct
    row += s;
  }
  if (autograd::needs_grad({x})) {
    std::vector<Tensor*> outs;
    for (auto& p : parts) outs.push_back(&p);
    autograd::record(std::make_shared<SplitRowsNode>(x.shape(), sizes, x.dtype()), {x}, outs);
  }
  return parts;
}

Tensor concat_rows(const std::vector<Tensor>& xs) {
  if (xs.empty()) UNILLM_THROW(ShapeError, "[concat_rows] nothing to concatenate");
  Shape shape = xs[0].shape();
  if (shape.empty()) UNILLM_THROW(ShapeError, "[concat_rows] scalars have no rows");
  std::vector<int64_t> sizes;
  int64_t total = 0;
  for (const Tensor& x : xs) {
    Shape rest = x.shape();
    if (rest.empty() || x.dtype() != xs[0].dtype() || x.device() != xs[0].device() ||
        !std::equal(rest.begin() + 1, rest.end(), shape.begin() + 1, shape.end()))
      UNILLM_THROW(ShapeError, "[concat_rows] ", shape_str(x.shape()), " ", dtype_name(x.dtype()),
                   " does not match ", shape_str(shape), " ", dtype_name(xs[0].dtype()));
    sizes.push_back(x.size(0));
    total += x.size(0);
  }
  shape[0] = total;
  Tensor out = Tensor::empty(shape, xs[0].dtype(), xs[0].device());
  int64_t row = 0;
  for (const Tensor& x : xs) {
    if (x.size(0) > 0) out.slice(0, row, row + x.size(0)).copy_from(x);
    row += x.size(0);
  }
  if (autograd::needs_grad(xs)) autograd::record(std::make_shared<ConcatRowsNode>(sizes), xs, {&out});
  return out;
}

}  // namespace unillm::ops
