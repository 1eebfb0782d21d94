// asft_cross_entropy: checks, one "asft_cross_entropy" kernel call (forward and gradients),
// AsftNode (rescales the eager gradients to the actual d(loss_sum)) and the naive reference.
#include "ops/asft_cross_entropy.h"

#include <cmath>
#include <limits>

#include "autograd/node.h"
#include "ops/cross_entropy.h"
#include "ops/dispatch.h"
#include "ops/kernel_call.h"

namespace unillm::ops {
namespace {

constexpr const char* kOp = "asft_cross_entropy";

void check_asft(const Tensor& x, const Tensor& w, const Tensor& x_ref, const Tensor& w_ref,
                const Tensor& labels) {
  check_defined(kOp, "x", x);
  check_defined(kOp, "weight", w);
  check_defined(kOp, "x_ref", x_ref);
  check_defined(kOp, "ref_weight", w_ref);
  check_defined(kOp, "labels", labels);
  check_f32_or_f64(kOp, "x", x);
  check_ndim(kOp, "x", x, 2);
  check_ndim(kOp, "weight", w, 2);
  check_dtype(kOp, "x_ref", x_ref, x.dtype());
  check_dtype(kOp, "labels", labels, DType::i32);
  check_ndim(kOp, "labels", labels, 1);
  check_same_device(kOp, x, w);
  check_same_device(kOp, x, x_ref);
  check_same_device(kOp, x, w_ref);
  if (!labels.device().is_cpu())
    UNILLM_THROW(DeviceError, "[asft_cross_entropy] labels must be on the CPU");
  if (x_ref.shape() != x.shape() || w.size(1) != x.size(1) || w_ref.shape() != w.shape() ||
      labels.size(0) != x.size(0))
    UNILLM_THROW(ShapeError, "[asft_cross_entropy] shapes x ", shape_str(x.shape()), ", weight ",
                 shape_str(w.shape()), ", x_ref ", shape_str(x_ref.shape()), ", ref_weight ",
                 shape_str(w_ref.shape()), ", labels ", shape_str(labels.shape()),
                 ": expected [N, C], [V, C], [N, C], [V, C], [N]");
  auto w_ok = [&](const Tensor& t) {
    return x.dtype() == DType::f64
               ? t.dtype() == DType::f64
               : (t.dtype() == DType::f32 || t.dtype() == DType::bf16 || t.dtype() == DType::f16);
  };
  if (!w_ok(w) || !w_ok(w_ref))
    UNILLM_THROW(DTypeError, "[asft_cross_entropy] weights ", dtype_name(w.dtype()), " / ",
                 dtype_name(w_ref.dtype()), " with x ", dtype_name(x.dtype()), ", expected ",
                 x.dtype() == DType::f64 ? "f64" : "f32, bf16 or f16");
}

int64_t count_labels(const Tensor& labels, int64_t vocab) {
  const int32_t* p = labels.data<int32_t>();
  int64_t count = 0;
  for (int64_t i = 0; i < labels.numel(); ++i) {
    if (p[i] == kIgnoreIndex) continue;
    if (p[i] < 0 || p[i] >= vocab)
      UNILLM_THROW(ShapeError, "[asft_cross_entropy] label ", p[i], " at row ", i,
                   " is outside the vocabulary [0, ", vocab, ") and is not the ignore index ",
                   kIgnoreIndex);
    ++count;
  }
  return count;
}

// Holds gradients computed in the forward for an assumed d(loss_sum); scales them to the actual
// one.
class AsftNode : public autograd::Node {
 public:
  AsftNode(Tensor dx, Tensor dw, double assumed)
      : dx_(std::move(dx)), dw_(std::move(dw)), assumed_(assumed) {}
  std::string name() const override { return "AsftNode"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    const double f = g[0].item_flat(0) / assumed_;
    auto scaled = [f](const Tensor& t) {
      if (!t.defined() || f == 1.0) return t;
      Tensor out = t.to(Device{}).to(DType::f64);
      double* p = out.data<double>();
      for (int64_t i = 0; i < out.numel(); ++i) p[i] *= f;
      return out.to(t.dtype()).to(t.device());
    };
    std::vector<Tensor> out{needs_input_grad(0) ? scaled(dx_) : Tensor(),
                            needs_input_grad(1) ? scaled(dw_) : Tensor(), Tensor()};
    dx_ = dw_ = Tensor();  // one backward: the gradients are consumed
    return out;
  }

 private:
  Tensor dx_, dw_;
  double assumed_;
};

}  // namespace

AsftCrossEntropy asft_cross_entropy(const Tensor& x_in, const Tensor& w_in, const Tensor& x_ref_in,
                                    const Tensor& w_ref_in, const Tensor& labels_in,
                                    const AsftOptions& o) {
  check_asft(x_in, w_in, x_ref_in, w_ref_in, labels_in);
  const Tensor x = x_in.contiguous(), w = w_in.contiguous(), x_ref = x_ref_in.contiguous().detach(),
               w_ref = w_ref_in.contiguous().detach(), labels = labels_in.contiguous();
  const int64_t n = x.size(0), c = x.size(1), v = w.size(0);
  AsftCrossEntropy r;
  r.count = count_labels(labels, v);
  const bool gx = autograd::needs_grad({x_in}), gw = autograd::needs_grad({w_in});
  const double scale =
      o.grad_scale != 0.0 ? o.grad_scale : 1.0;  // 0 would lose the gradients' shape
  Tensor dx = gx ? Tensor::empty(x.shape(), x.dtype(), x.device()) : Tensor();
  Tensor dw = gw ? Tensor::empty(w.shape(), master_grad_dtype(w.dtype()), w.device()) : Tensor();
  std::vector<double> ce(static_cast<size_t>(n), 0.0), kl(static_cast<size_t>(n), 0.0);
  Tensor ce_host = Tensor::from_blob(ce.data(), {n}, DType::f64, nullptr);
  Tensor kl_host = Tensor::from_blob(kl.data(), {n}, DType::f64, nullptr);
  Tensor ce_dev = w.device().is_cpu() ? ce_host : Tensor::empty({n}, DType::f64, w.device());
  Tensor kl_dev = w.device().is_cpu() ? kl_host : Tensor::empty({n}, DType::f64, w.device());
  const Tensor lab = labels.to(w.device());
  const int64_t chunk = o.chunk_rows > 0 ? o.chunk_rows : cross_entropy_auto_chunk(v, x.dtype());
  AsftCrossEntropyArgs a{nullptr, nullptr, nullptr, nullptr,   nullptr,   nullptr,
                         nullptr, o.alpha, scale,   nullptr,   nullptr,   n,
                         c,       v,       chunk,   x.dtype(), w.dtype(), w_ref.dtype()};
  KernelCall<AsftCrossEntropyArgs>(kOp, w.device(), w.dtype(), a)
      .in(x, &a.x)
      .in(w, &a.w)
      .in(x_ref, &a.x_ref)
      .in(w_ref, &a.w_ref)
      .in(lab, &a.labels)
      .out(ce_dev, &a.ce)
      .out(kl_dev, &a.kl)
      .out(dx, &a.dx)
      .out(dw, &a.dw)
      .run(asft_cross_entropy_reference);
  if (!w.device().is_cpu()) {
    ce_host.copy_from(ce_dev);
    kl_host.copy_from(kl_dev);
  }
  for (int64_t i = 0; i < n; ++i) {  // row order: deterministic
    r.dft_sum += std::exp(-ce[i]) * ce[i];
    r.kl_sum += kl[i];
  }
  r.loss_sum = Tensor::empty({}, x.dtype(), x.device());
  r.loss_sum.fill(r.dft_sum + o.alpha * r.kl_sum);
  if (gx || gw)
    autograd::record(std::make_shared<AsftNode>(dx, dw, scale), {x_in, w_in, labels_in},
                     {&r.loss_sum});
  return r;
}

void asft_cross_entropy_reference(const AsftCrossEntropyArgs& a) {
  const DType gwt = master_grad_dtype(a.w_dtype);
  std::vector<double> dw(a.dw ? static_cast<size_t>(a.v * a.c) : 0, 0.0), lp(a.v), lq(a.v);
  auto logits = [&](const void* x, const void* w, DType wt, int64_t i, std::vector<double>& out) {
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < a.v; ++j) {
      double s = 0;
      for (int64_t p = 0; p < a.c; ++p)
        s += load_scalar(x, a.x_dtype, i * a.c + p) * load_scalar(w, wt, j * a.c + p);
      out[j] = s;
      mx = std::max(mx, s);
    }
    double z = 0;
    for (double e : out) z += std::exp(e - mx);
    for (double& e : out) e -= mx + std::log(z);  // log-softmax
  };
  for (int64_t i = 0; i < a.n; ++i) {
    a.ce[i] = a.kl[i] = 0;
    const bool labelled = a.labels[i] != kIgnoreIndex;
    if (labelled) {
      logits(a.x, a.w, a.w_dtype, i, lp);
      logits(a.x_ref, a.w_ref, a.w_ref_dtype, i, lq);
      a.ce[i] = -lp[a.labels[i]];
      for (int64_t j = 0; j < a.v; ++j) a.kl[i] += std::exp(lq[j]) * (lq[j] - lp[j]);
      const double dft = a.grad_scale * std::exp(-a.ce[i]), kls = a.grad_scale * a.alpha;
      for (int64_t j = 0; j < a.v; ++j)
        lp[j] = (dft + kls) * std::exp(lp[j]) - kls * std::exp(lq[j]);
      lp[a.labels[i]] -= dft;  // now dlogits
    }
    for (int64_t p = 0; a.dx && p < a.c; ++p) {
      double s = 0;
      for (int64_t j = 0; labelled && j < a.v; ++j)
        s += lp[j] * load_scalar(a.w, a.w_dtype, j * a.c + p);
      store_scalar(a.dx, a.x_dtype, i * a.c + p, s);
    }
    for (int64_t j = 0; a.dw && labelled && j < a.v; ++j)
      for (int64_t p = 0; p < a.c; ++p)
        dw[j * a.c + p] += lp[j] * load_scalar(a.x, a.x_dtype, i * a.c + p);
  }
  for (int64_t e = 0; a.dw && e < a.v * a.c; ++e) store_scalar(a.dw, gwt, e, dw[e]);
}

}  // namespace unillm::ops
