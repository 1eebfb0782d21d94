// take_rows / take_cols: row-wise byte copies through the backend (copy_bytes), so they work on
// any device and dtype; the backward writes the block's gradient into zeros of the input's shape.
#include "ops/take.h"

#include "autograd/node.h"
#include "ops/dispatch.h"

namespace unillm::ops {
namespace {

using Ranges = std::vector<std::pair<int64_t, int64_t>>;

// Copies block rows of src [rows, src_cols] (columns [src_col, src_col + cols)) to dst
// [rows, dst_cols] (columns [dst_col, …)); rows of the two map through the ranges.
struct Block {
  int64_t src_row, dst_row, rows, src_col, dst_col, cols;
};

void copy_block(const Tensor& src, Tensor& dst, const Block& b) {
  const size_t es = dtype_size(src.dtype());
  const int64_t sk = src.ndim() == 1 ? 1 : src.size(1), dk = dst.ndim() == 1 ? 1 : dst.size(1);
  const auto* s = static_cast<const char*>(src.raw_data());
  auto* d = static_cast<char*>(dst.raw_data());
  if (b.cols == sk && b.cols == dk) {  // whole rows: one copy
    copy_bytes(d + b.dst_row * dk * es, dst.device(), s + b.src_row * sk * es, src.device(),
               static_cast<size_t>(b.rows * b.cols) * es);
    return;
  }
  for (int64_t r = 0; r < b.rows; ++r)
    copy_bytes(d + ((b.dst_row + r) * dk + b.dst_col) * es, dst.device(),
               s + ((b.src_row + r) * sk + b.src_col) * es, src.device(), static_cast<size_t>(b.cols) * es);
}

std::vector<Block> row_blocks(const Ranges& ranges, int64_t cols) {
  std::vector<Block> out;
  int64_t at = 0;
  for (const auto& [lo, hi] : ranges) {
    out.push_back({lo, at, hi - lo, 0, 0, cols});
    at += hi - lo;
  }
  return out;
}

class TakeNode : public autograd::Node {
 public:
  TakeNode(Shape in_shape, std::vector<Block> blocks) : in_shape_(std::move(in_shape)), blocks_(std::move(blocks)) {}
  std::string name() const override { return "TakeNode"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    const Tensor dy = g[0].contiguous();
    Tensor dx = Tensor::zeros(in_shape_, dy.dtype(), dy.device());
    for (Block b : blocks_) {  // the forward's copies, reversed
      std::swap(b.src_row, b.dst_row);
      std::swap(b.src_col, b.dst_col);
      copy_block(dy, dx, b);
    }
    return {dx};
  }

 private:
  Shape in_shape_;
  std::vector<Block> blocks_;
};

Tensor take(const Tensor& x_in, const Shape& out_shape, const std::vector<Block>& blocks) {
  const Tensor x = x_in.contiguous();
  Tensor out = Tensor::empty(out_shape, x.dtype(), x.device());
  if (out.numel() > 0)
    for (const Block& b : blocks) copy_block(x, out, b);
  // The gradient keeps dy's dtype (a bf16 weight's is f32, as ops::linear gives it).
  if (autograd::needs_grad({x_in})) autograd::record(std::make_shared<TakeNode>(x_in.shape(), blocks), {x_in}, {&out});
  return out;
}

}  // namespace

Tensor take_rows(const Tensor& x, const Ranges& ranges) {
  check_defined("take_rows", "x", x);
  if (x.ndim() != 1 && x.ndim() != 2)
    UNILLM_THROW(ShapeError, "[take_rows] x must be 1-D or 2-D, got ", shape_str(x.shape()));
  int64_t rows = 0;
  for (const auto& [lo, hi] : ranges) {
    if (lo < 0 || hi > x.size(0) || lo > hi)
      UNILLM_THROW(ShapeError, "[take_rows] rows [", lo, ", ", hi, ") of ", x.size(0));
    rows += hi - lo;
  }
  const int64_t cols = x.ndim() == 1 ? 1 : x.size(1);
  return take(x, x.ndim() == 1 ? Shape{rows} : Shape{rows, cols}, row_blocks(ranges, cols));
}

Tensor take_cols(const Tensor& x, int64_t begin, int64_t end) {
  check_defined("take_cols", "x", x);
  check_ndim("take_cols", "x", x, 2);
  if (begin < 0 || end > x.size(1) || begin > end)
    UNILLM_THROW(ShapeError, "[take_cols] columns [", begin, ", ", end, ") of ", x.size(1));
  return take(x, {x.size(0), end - begin}, {{0, 0, x.size(0), begin, 0, end - begin}});
}

}  // namespace unillm::ops
