// gather_rows: row copies through the owning backend, so it works on any device and dtype (idx is
// read on the CPU). Backward: GatherRowsNode scatter-adds the output gradient back (f32/f64).
#include "ops/gather.h"

#include "autograd/node.h"
#include "ops/dispatch.h"
#include "ops/kernel_call.h"
#include "ops/plugin_args.h"

namespace unillm::ops {
namespace {

constexpr const char* kOp = "gather_rows";

class GatherRowsNode : public autograd::Node {
 public:
  GatherRowsNode(const Tensor& idx, int64_t rows) : idx_(idx), rows_(rows) {}
  std::string name() const override { return "GatherRowsNode"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    return {scatter_add_rows(g[0], idx_.get(), rows_), Tensor()};
  }
  void release_saved() override { idx_.release(); }

 private:
  autograd::SavedTensor idx_;  // [M] i32
  int64_t rows_;
};

Tensor gather_rows_forward(const Tensor& x_in, const Tensor& idx_in) {
  check_defined(kOp, "x", x_in);
  check_defined(kOp, "idx", idx_in);
  check_ndim(kOp, "x", x_in, 2);
  check_ndim(kOp, "idx", idx_in, 1);
  check_dtype(kOp, "idx", idx_in, DType::i32);
  if (!idx_in.device().is_cpu())
    UNILLM_THROW(DeviceError, "[gather_rows] idx must be on the CPU");
  Tensor x = x_in.contiguous(), idx = idx_in.contiguous();
  const int64_t rows = x.size(0), m = idx.size(0);
  const int32_t* ip = idx.data<int32_t>();
  for (int64_t i = 0; i < m; ++i)
    if (ip[i] < 0 || ip[i] >= rows)
      UNILLM_THROW(ShapeError, "[gather_rows] idx[", i, "] = ", ip[i], " is outside [0, ", rows, ")");
  Tensor out = Tensor::empty({m, x.size(1)}, x.dtype(), x.device());
  const size_t row_bytes = static_cast<size_t>(x.size(1)) * dtype_size(x.dtype());
  if (row_bytes == 0) return out;
  auto* src = static_cast<const char*>(x.raw_data());
  auto* dst = static_cast<char*>(out.raw_data());
  for (int64_t i = 0; i < m; ++i)
    copy_bytes(dst + i * row_bytes, x.device(), src + ip[i] * row_bytes, x.device(), row_bytes);
  return out;
}

}  // namespace

Tensor gather_rows(const Tensor& x, const Tensor& idx) {
  Tensor out = gather_rows_forward(x, idx);
  if (autograd::needs_grad({x})) {
    check_f32_or_f64(kOp, "x (for its gradient)", x);
    auto node = std::make_shared<GatherRowsNode>(idx.contiguous(), x.size(0));
    autograd::record(node, {x, idx}, {&out});
  }
  return out;
}

Tensor scatter_add_rows(const Tensor& src_in, const Tensor& idx_in, int64_t rows) {
  check_f32_or_f64("scatter_add_rows", "src", src_in);
  Tensor src = src_in.contiguous(), idx = idx_in.contiguous();
  UNILLM_CHECK(idx.device().is_cpu() && idx.dtype() == DType::i32 && src.ndim() == 2 &&
               idx.numel() == src.size(0));
  Tensor dst = Tensor::empty({rows, src.size(1)}, src.dtype(), src.device());
  if (dst.numel() == 0) return dst;
  const Tensor dev_idx = idx.to(src.device());
  ScatterRowsArgs a{nullptr, src.raw_data(), dst.raw_data(), idx.numel(), rows,
                    src.size(1), src.dtype()};
  KernelCall<ScatterRowsArgs>("scatter_add_rows", src.device(), src.dtype(), a)
      .in(dev_idx, &a.idx).in(src, &a.src).out(dst, &a.dst).run(scatter_add_rows_reference);
  return dst;
}

void scatter_add_rows_reference(const ScatterRowsArgs& a) {
  for (int64_t i = 0; i < a.rows * a.dim; ++i) store_scalar(a.dst, a.dtype, i, 0.0);
  for (int64_t i = 0; i < a.m; ++i)
    for (int64_t c = 0; c < a.dim; ++c) {
      const int64_t d = int64_t{a.idx[i]} * a.dim + c;
      store_scalar(a.dst, a.dtype, d,
                   load_scalar(a.dst, a.dtype, d) + load_scalar(a.src, a.dtype, i * a.dim + c));
    }
}

}  // namespace unillm::ops
