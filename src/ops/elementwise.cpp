// add / mul on same-shape, same-dtype f32/f64 tensors (kernel key = dtype). Backward: AddNode
// (identity) and MulNode (the other operand, saved only when needed).
#include "ops/elementwise.h"

#include "autograd/node.h"
#include "ops/dispatch.h"
#include "ops/kernel_call.h"
#include "ops/plugin_args.h"

namespace unillm::ops {
namespace {

using Reference = void (*)(const BinaryArgs&);

Tensor binary_forward(const char* op, const Tensor& a_in, const Tensor& b_in, Reference ref) {
  check_defined(op, "a", a_in);
  check_defined(op, "b", b_in);
  check_f32_or_f64(op, "a", a_in);
  check_dtype(op, "b", b_in, a_in.dtype());
  check_same_device(op, a_in, b_in);
  if (a_in.shape() != b_in.shape())
    UNILLM_THROW(ShapeError, "[", op, "] b has shape ", shape_str(b_in.shape()), ", expected ",
                 shape_str(a_in.shape()), " (no broadcasting)");
  Tensor a = a_in.contiguous(), b = b_in.contiguous();
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  if (out.numel() == 0) return out;
  BinaryArgs args{a.raw_data(), b.raw_data(), out.raw_data(), a.numel(), a.dtype()};
  KernelCall<BinaryArgs>(op, a.device(), a.dtype(), args)
      .in(a, &args.a).in(b, &args.b).out(out, &args.out).run(ref);
  return out;
}

class AddNode : public autograd::Node {
 public:
  explicit AddNode(DType dtype) : dtype_(dtype) {}
  std::string name() const override { return "AddNode"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    Tensor d = g[0].to(dtype_);
    return {needs_input_grad(0) ? d : Tensor(), needs_input_grad(1) ? d : Tensor()};
  }

 private:
  DType dtype_;
};

class MulNode : public autograd::Node {
 public:
  MulNode(const Tensor& a, const Tensor& b) : a_(a), b_(b) {}
  std::string name() const override { return "MulNode"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    Tensor da, db;  // the engine runs backward with grad mode off, so mul() records nothing
    if (needs_input_grad(0)) da = mul(g[0].to(b_.get().dtype()), b_.get());
    if (needs_input_grad(1)) db = mul(g[0].to(a_.get().dtype()), a_.get());
    return {da, db};
  }
  void release_saved() override {
    a_.release();
    b_.release();
  }

 private:
  autograd::SavedTensor a_, b_;  // a is saved only when b needs grad, and b when a does
};

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward("add", a, b, &add_reference);
  if (autograd::needs_grad({a, b}))
    autograd::record(std::make_shared<AddNode>(a.dtype()), {a, b}, {&out});
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward("mul", a, b, &mul_reference);
  if (autograd::needs_grad({a, b})) {
    const bool ga = autograd::needs_grad({a}), gb = autograd::needs_grad({b});
    auto node = std::make_shared<MulNode>(gb ? a : Tensor(), ga ? b : Tensor());
    autograd::record(node, {a, b}, {&out});
  }
  return out;
}

void add_reference(const BinaryArgs& a) {
  for (int64_t i = 0; i < a.n; ++i)
    store_scalar(a.out, a.dtype, i, load_scalar(a.a, a.dtype, i) + load_scalar(a.b, a.dtype, i));
}

void mul_reference(const BinaryArgs& a) {
  for (int64_t i = 0; i < a.n; ++i)
    store_scalar(a.out, a.dtype, i, load_scalar(a.a, a.dtype, i) * load_scalar(a.b, a.dtype, i));
}

}  // namespace unillm::ops
