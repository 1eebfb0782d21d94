// oft_linear: per-part rotation + linear, the pieces concatenated (ConcatColumnsNode gives each
// piece its columns of dy). See oft_linear.h.
#include "ops/oft_linear.h"

#include <memory>

#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "ops/dispatch.h"
#include "ops/oft_rotate.h"
#include "ops/shape.h"

namespace unillm::ops {
namespace {

class ConcatColumnsNode : public autograd::Node {
 public:
  explicit ConcatColumnsNode(std::vector<int64_t> cols) : cols_(std::move(cols)) {}
  std::string name() const override { return "ConcatColumnsNode"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    const Tensor& dy = g[0];
    const int last = dy.ndim() - 1;
    std::vector<Tensor> out;
    int64_t col = 0;
    for (size_t i = 0; i < cols_.size(); ++i) {
      if (needs_input_grad(i)) out.push_back(dy.slice(last, col, col + cols_[i]).contiguous());
      else out.emplace_back();
      col += cols_[i];
    }
    return out;
  }

 private:
  std::vector<int64_t> cols_;
};

// pieces [.., c_i] (same leading shape and dtype) → [.., Σ c_i].
Tensor concat_columns(const std::vector<Tensor>& pieces) {
  if (pieces.size() == 1) return pieces[0];
  Shape shape = pieces[0].shape();
  std::vector<int64_t> cols;
  int64_t total = 0;
  for (const Tensor& p : pieces) {
    cols.push_back(p.size(-1));
    total += p.size(-1);
  }
  shape.back() = total;
  Tensor y = Tensor::empty(shape, pieces[0].dtype(), pieces[0].device());
  const int last = y.ndim() - 1;
  int64_t col = 0;
  for (const Tensor& p : pieces) {
    y.slice(last, col, col + p.size(-1)).copy_from(p);
    col += p.size(-1);
  }
  if (autograd::needs_grad(pieces))
    autograd::record(std::make_shared<ConcatColumnsNode>(std::move(cols)), pieces, {&y});
  return y;
}

void check_parts(int64_t rows, const OftLinearInput& in) {
  int64_t next = 0;
  for (const OftLinearPart& p : in.parts) {
    if (p.col_begin != next || p.cols <= 0)
      UNILLM_THROW(ShapeError, "[oft_linear] part [", p.col_begin, ", +", p.cols, ") does not continue at row ", next);
    next += p.cols;
  }
  if (next != rows) UNILLM_THROW(ShapeError, "[oft_linear] parts cover ", next, " rows of W's ", rows);
}

}  // namespace

Tensor oft_linear(const Tensor& x, const Tensor& w, const Tensor& bias, const OftLinearInput& in,
                  OutputUse use) {
  check_defined("oft_linear", "W", w);
  check_ndim("oft_linear", "W", w, 2);
  check_parts(w.size(0), in);
  // The per-part views of W and b carry no gradient: the base must be frozen.
  if (autograd::grad_enabled() && (w.requires_grad() || (bias.defined() && bias.requires_grad())))
    UNILLM_THROW(NotImplemented, "[oft_linear] the base weight and bias must be frozen under OFT");
  std::vector<Tensor> pieces;
  size_t i = 0;
  while (i < in.parts.size()) {
    const OftLinearPart& p = in.parts[i];
    int64_t begin = p.col_begin, end = begin + p.cols;
    Tensor xin = x;
    if (p.first_row >= 0) {
      xin = oft_rotate(x, {in.weight, p.first_row, in.block_size, in.neumann, in.terms});
      ++i;
    } else {  // a run of untargeted parts: one GEMM
      for (++i; i < in.parts.size() && in.parts[i].first_row < 0; ++i) end += in.parts[i].cols;
    }
    const Tensor b = bias.defined() ? bias.slice(0, begin, end) : Tensor();
    pieces.push_back(linear(xin, w.slice(0, begin, end), b, use));
  }
  return concat_columns(pieces);
}

Tensor oft_linear_q(const Tensor& x, const QuantizedWeight& q, const Tensor& bias, const OftLinearInput& in) {
  check_parts(q.n, in);
  std::vector<int64_t> sizes;
  for (const OftLinearPart& p : in.parts) sizes.push_back(p.cols);
  std::vector<Tensor> pieces;
  Tensor plain;  // linear_q(x), shared by the untargeted parts
  for (size_t i = 0; i < in.parts.size(); ++i) {
    const OftLinearPart& p = in.parts[i];
    Tensor full;
    if (p.first_row >= 0) {
      full = linear_q(oft_rotate(x, {in.weight, p.first_row, in.block_size, in.neumann, in.terms}), q, bias);
    } else {
      if (!plain.defined()) plain = linear_q(x, q, bias);
      full = plain;
    }
    pieces.push_back(in.parts.size() == 1 ? full : split_last(full, sizes)[i]);
  }
  return concat_columns(pieces);
}

}  // namespace unillm::ops
