// embedding: rows of a table picked by ids (kernel key = the table's dtype). Ids are range-checked
// here, so kernels may trust them. Backward: EmbeddingNode scatter-adds the output gradient into
// a dense [V, C] table gradient (ops::scatter_add_rows).
#include "ops/embedding.h"

#include "autograd/node.h"
#include "ops/dispatch.h"
#include "ops/kernel_call.h"
#include "ops/plugin_args.h"
#include "ops/gather.h"

namespace unillm::ops {
namespace {

constexpr const char* kOp = "embedding";

void check_embedding(const Tensor& ids, const Tensor& table) {
  check_defined(kOp, "ids", ids);
  check_defined(kOp, "table", table);
  check_dtype(kOp, "ids", ids, DType::i32);
  check_ndim(kOp, "table", table, 2);
  if (!is_floating(table.dtype()))
    UNILLM_THROW(DTypeError, "[embedding] table has dtype ", dtype_name(table.dtype()),
                 ", expected f32, f64, bf16 or f16");
  if (!ids.device().is_cpu())
    UNILLM_THROW(DeviceError, "[embedding] ids must be on the CPU (they are range-checked there)");
}

void check_ids(const Tensor& ids, int64_t vocab) {
  const int32_t* p = ids.data<int32_t>();
  for (int64_t i = 0; i < ids.numel(); ++i)
    if (p[i] < 0 || p[i] >= vocab)
      UNILLM_THROW(ShapeError, "[embedding] id ", p[i], " at position ", i,
                   " is outside the vocabulary [0, ", vocab, ")");
}

class EmbeddingNode : public autograd::Node {
 public:
  EmbeddingNode(const Tensor& ids, int64_t vocab, int64_t dim, DType grad_dtype)
      : ids_(ids), vocab_(vocab), dim_(dim), grad_dtype_(grad_dtype) {}
  std::string name() const override { return "EmbeddingNode"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    const Tensor& ids = ids_.get();
    Tensor dout = g[0].to(grad_dtype_).reshape({ids.numel(), dim_});  // [N, C]
    return {Tensor(), scatter_add_rows(dout, ids.reshape({ids.numel()}), vocab_)};
  }
  void release_saved() override { ids_.release(); }

 private:
  autograd::SavedTensor ids_;  // i32, the caller's shape
  int64_t vocab_, dim_;
  DType grad_dtype_;
};

Tensor embedding_forward(const Tensor& ids_in, const Tensor& table_in) {
  check_embedding(ids_in, table_in);
  Tensor ids = ids_in.contiguous(), table = table_in.contiguous();
  const int64_t vocab = table.size(0), dim = table.size(1);
  check_ids(ids, vocab);
  DType out_dtype = table.dtype() == DType::f64 ? DType::f64 : DType::f32;
  Shape out_shape = ids.shape();
  out_shape.push_back(dim);
  Tensor out = Tensor::empty(out_shape, out_dtype, table.device());
  if (out.numel() == 0) return out;
  const Tensor dev_ids = ids.to(table.device());  // checked on the host above
  EmbeddingArgs a{nullptr, table.raw_data(), out.raw_data(), ids.numel(), vocab, dim,
                  table.dtype(), out_dtype};
  KernelCall<EmbeddingArgs>(kOp, table.device(), table.dtype(), a)
      .in(dev_ids, &a.ids).in(table, &a.table).out(out, &a.out).run(embedding_reference);
  return out;
}

}  // namespace

Tensor embedding(const Tensor& ids, const Tensor& table) {
  Tensor out = embedding_forward(ids, table);
  if (autograd::needs_grad({table})) {
    auto node = std::make_shared<EmbeddingNode>(ids.contiguous(), table.size(0), table.size(1),
                                                out.dtype());
    autograd::record(node, {ids, table}, {&out});
  }
  return out;
}

void embedding_reference(const EmbeddingArgs& a) {
  for (int64_t i = 0; i < a.n; ++i)
    for (int64_t c = 0; c < a.dim; ++c)
      store_scalar(a.out, a.out_dtype, i * a.dim + c,
                   load_scalar(a.table, a.table_dtype, int64_t{a.ids[i]} * a.dim + c));
}

}  // namespace unillm::ops
