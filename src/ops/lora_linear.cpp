// lora_linear: checks, the forward composed from the base linear and strided GEMMs ("lora_gemm"
// kernels, naive reference as the CPU fallback), dropout masks from an explicit seed, and the
// LoraLinearNode backward (see lora_linear.h for the maths).
#include "ops/lora_linear.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "ops/dispatch.h"
#include "ops/kernel_call.h"
#include "ops/plugin_args.h"
#include "ops/linear.h"

namespace unillm::ops {
namespace {

constexpr const char* kOp = "lora_linear";

// n: the layer's output columns (W's rows).
void check_adapter(const Tensor& x, int64_t n, const LoraAdapterInput& ad, size_t i) {
  check_defined(kOp, "A", ad.a);
  check_defined(kOp, "B", ad.b);
  check_ndim(kOp, "A", ad.a, 2);
  check_ndim(kOp, "B", ad.b, 2);
  check_dtype(kOp, "A", ad.a, x.dtype());
  check_dtype(kOp, "B", ad.b, x.dtype());
  check_same_device(kOp, x, ad.a);
  check_same_device(kOp, x, ad.b);
  const auto parts = static_cast<int64_t>(ad.parts.size());
  const int64_t r = ad.b.size(1);
  if (parts == 0 || ad.a.size(0) != parts * r || ad.a.size(1) != x.size(-1))
    UNILLM_THROW(ShapeError, "[lora_linear] adapter ", i, ": A has shape ", shape_str(ad.a.shape()),
                 ", expected [", parts, " parts x rank ", r, ", ", x.size(-1), "]");
  for (const LoraPart& p : ad.parts)
    if (p.cols <= 0 || p.col_begin < 0 || p.col_begin + p.cols > n || p.b_row < 0 ||
        p.b_row + p.cols > ad.b.size(0))
      UNILLM_THROW(ShapeError, "[lora_linear] adapter ", i, ": part [", p.col_begin, ", +", p.cols,
                   ") with B row ", p.b_row, " is outside W (", n, " rows) or B ",
                   shape_str(ad.b.shape()));
  if (!(ad.dropout >= 0.0 && ad.dropout < 1.0))
    UNILLM_THROW(ConfigError, "[lora_linear] dropout ", ad.dropout, " outside [0, 1)");
}

// C = alpha·op(A)·op(B) + beta·C on sub-blocks of ta, tb, tc (the args point into them; C is
// bound in-out: the product writes a block of it).
void gemm(LoraGemmArgs g, const Tensor& ta, const Tensor& tb, const Tensor& tc) { strided_gemm(g, ta, tb, tc); }

// Element pointer arithmetic on raw buffers of dtype (f32/f64).
const void* at(const Tensor& t, int64_t elements) {
  return static_cast<const char*>(t.raw_data()) +
         elements * static_cast<int64_t>(dtype_size(t.dtype()));
}
void* at_mut(const Tensor& t, int64_t elements) {
  return static_cast<char*>(t.raw_data()) + elements * static_cast<int64_t>(dtype_size(t.dtype()));
}

// out (=, or += when accumulate) in ⊙ keep / (1 − p), n elements.
template <typename T>
void apply_mask_t(const T* in, const uint8_t* keep, double p, T* out, int64_t n, bool accumulate) {
  const T scale = static_cast<T>(1.0 / (1.0 - p));
  parallel_for(n, 1 << 14, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const T v = keep[i] ? in[i] * scale : T(0);
      out[i] = accumulate ? out[i] + v : v;
    }
  });
}

void apply_mask(const Tensor& in, const std::vector<uint8_t>& keep, double p, Tensor& out,
                bool accumulate) {
  UNILLM_CHECK(in.device().is_cpu(), "[lora_linear] dropout is implemented on the CPU only");
  const int64_t n = in.numel();
  if (in.dtype() == DType::f64)
    apply_mask_t(in.data<double>(), keep.data(), p, out.data<double>(), n, accumulate);
  else
    apply_mask_t(in.data<float>(), keep.data(), p, out.data<float>(), n, accumulate);
}

// What forward keeps per adapter for backward.
struct AdapterSaved {
  autograd::SavedTensor a, b, xa;  // A [R, K], B [Σ cols, r], xa = drop(x)·Aᵀ [M, R]
  std::vector<LoraPart> parts;
  double scaling = 1, dropout = 0;
  std::vector<std::vector<uint8_t>> keep;  // per part [M·K] when dropout > 0
  int64_t r = 0;
};

// x [M, K] contiguous; adds adapter's delta into y [M, N] (not for kGradOnly); fills st.
void adapter_forward(const Tensor& x, const LoraAdapterInput& in, Tensor& y, AdapterSaved& st,
                     OutputUse use) {
  const int64_t m = x.size(0), k = x.size(1), n = y.size(1);
  const Tensor a = in.a.contiguous(), b = in.b.contiguous();
  const int64_t r = b.size(1), rr = a.size(0);
  const DType dt = x.dtype();
  Tensor xa = Tensor::empty({m, rr}, dt, x.device());  // [M, R]
  if (in.dropout == 0.0) {
    gemm({x.raw_data(), a.raw_data(), xa.raw_data(), m, rr, k, k, k, rr, false, true, 1.0, 0.0, dt},
         x, a, xa);
  } else {
    Tensor xd = Tensor::empty({m, k}, dt, x.device());
    for (size_t p = 0; p < in.parts.size(); ++p) {
      st.keep.emplace_back(static_cast<size_t>(m * k));
      if (in.mask_cols > 0) {  // the whole input's mask, cut to x's columns
        std::vector<uint8_t> whole(static_cast<size_t>(m * in.mask_cols));
        lora_dropout_mask(lora_part_seed(in.seed, p), in.dropout, m, in.mask_cols, whole.data(), in.mask_row_begin);
        for (int64_t row = 0; row < m; ++row)
          std::copy_n(whole.begin() + row * in.mask_cols + in.mask_col_begin, k, st.keep.back().begin() + row * k);
      } else {
        lora_dropout_mask(lora_part_seed(in.seed, p), in.dropout, m, k, st.keep.back().data(), in.mask_row_begin);
      }
      apply_mask(x, st.keep.back(), in.dropout, xd, false);
      gemm({xd.raw_data(), at(a, p * r * k), at_mut(xa, p * r), m, r, k, k, k, rr, false, true, 1.0,
            0.0, dt},
           xd, a, xa);
    }
  }
  for (size_t p = 0; use == OutputUse::kValue && p < in.parts.size(); ++p) {
    const LoraPart& pt = in.parts[p];
    gemm({at(xa, p * r), at(b, pt.b_row * r), at_mut(y, pt.col_begin), m, pt.cols, r, rr, r, n,
          false, true, in.scaling, 1.0, dt},
         xa, b, y);
  }
  st.a = autograd::SavedTensor(a);
  st.b = autograd::SavedTensor(b);
  st.xa = autograd::SavedTensor(xa);
  st.parts = in.parts;
  st.scaling = in.scaling;
  st.dropout = in.dropout;
  st.r = r;
}

class LoraLinearNode : public autograd::Node {
 public:
  // w undefined: no base (lora_delta), dx comes from the adapters alone.
  LoraLinearNode(const Tensor& x, const Tensor& w, int64_t n, bool has_bias, std::vector<AdapterSaved> ad)
      : x_(autograd::SavedTensor::activation(x)),
        w_(w),
        x_shape_(x.shape()),
        w_dtype_(w.defined() ? w.dtype() : x.dtype()),
        n_(n),
        has_bias_(has_bias),
        ad_(std::move(ad)) {}
  std::string name() const override { return "LoraLinearNode"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override;
  void release_saved() override {
    x_.release();
    w_.release();
    for (auto& a : ad_) {
      a.a.release(), a.b.release(), a.xa.release();
      a.keep.clear();
    }
  }

 private:
  void base_backward(const Tensor& dy, Tensor& dx, Tensor& dw, Tensor& db);
  void adapter_backward(const Tensor& dy, size_t i, Tensor& dx, Tensor& da, Tensor& db);
  autograd::SavedTensor x_, w_;  // x [M, K] contiguous, W [N, K]
  Shape x_shape_;
  DType w_dtype_;
  int64_t n_;
  bool has_bias_;
  std::vector<AdapterSaved> ad_;
};

void LoraLinearNode::base_backward(const Tensor& dy, Tensor& dx, Tensor& dw, Tensor& db) {
  const Tensor& x = x_.get();
  const int64_t m = x.size(0), k = x.size(1);
  if (needs_input_grad(0)) dx = Tensor::empty({m, k}, x.dtype(), dy.device());
  if (needs_input_grad(1)) dw = Tensor::empty({n_, k}, master_grad_dtype(w_dtype_), dy.device());
  if (has_bias_ && needs_input_grad(2)) db = Tensor::empty({n_}, x.dtype(), dy.device());
  if (!dx.defined() && !dw.defined() && !db.defined()) return;
  if (!w_.saved()) {  // lora_delta: no base, the adapters add into dx
    if (dx.defined()) dx.fill(0.0);
    return;
  }
  LinearBackwardArgs a{dy.raw_data(),
                       x.raw_data(),
                       w_.get().raw_data(),
                       dx.defined() ? dx.raw_data() : nullptr,
                       dw.defined() ? dw.raw_data() : nullptr,
                       db.defined() ? db.raw_data() : nullptr,
                       m,
                       k,
                       n_,
                       x.dtype(),
                       w_dtype_};
  KernelCall<LinearBackwardArgs>("linear_backward", dy.device(), w_dtype_, a)
      .in(dy, &a.dy).in(x, &a.x).in(w_.get(), &a.w).out(dx, &a.dx).out(dw, &a.dw).out(db, &a.db)
      .run(linear_backward_reference);
}

void LoraLinearNode::adapter_backward(const Tensor& dy, size_t i, Tensor& dx, Tensor& da,
                                      Tensor& dbb) {
  const AdapterSaved& s = ad_[i];
  const Tensor& x = x_.get();
  const Tensor &a = s.a.get(), &b = s.b.get(), &xa = s.xa.get();
  const int64_t m = x.size(0), k = x.size(1), n = n_, r = s.r, rr = a.size(0);
  const DType dt = x.dtype();
  const size_t ia = 3 + 2 * i, ib = ia + 1;
  if (needs_input_grad(ib)) {  // dB_p = s · dy_pᵀ · xa_p   [cols, r]
    dbb = Tensor::zeros(b.shape(), dt, dy.device());
    for (size_t p = 0; p < s.parts.size(); ++p) {
      const LoraPart& pt = s.parts[p];
      gemm({at(dy, pt.col_begin), at(xa, p * r), at_mut(dbb, pt.b_row * r), pt.cols, r, m, n, rr, r,
            true, false, s.scaling, 1.0, dt},
           dy, xa, dbb);
    }
  }
  if (!needs_input_grad(ia) && !dx.defined()) return;
  Tensor dxa = Tensor::empty({m, rr}, dt, dy.device());  // s · dy_p · B_p   [M, R]
  for (size_t p = 0; p < s.parts.size(); ++p) {
    const LoraPart& pt = s.parts[p];
    gemm({at(dy, pt.col_begin), at(b, pt.b_row * r), at_mut(dxa, p * r), m, r, pt.cols, n, r, rr,
          false, false, s.scaling, 0.0, dt},
         dy, b, dxa);
  }
  if (s.dropout == 0.0) {
    if (needs_input_grad(ia)) {  // dA = dxaᵀ · x   [R, K]
      da = Tensor::empty(a.shape(), dt, dy.device());
      gemm({dxa.raw_data(), x.raw_data(), da.raw_data(), rr, k, m, rr, k, k, true, false, 1.0, 0.0,
            dt},
           dxa, x, da);
    }
    if (dx.defined())  // dx += dxa · A
      gemm({dxa.raw_data(), a.raw_data(), dx.raw_data(), m, k, rr, rr, k, k, false, false, 1.0, 1.0,
            dt},
           dxa, a, dx);
    return;
  }
  if (needs_input_grad(ia)) da = Tensor::empty(a.shape(), dt, dy.device());
  Tensor tmp = Tensor::empty({m, k}, dt, dy.device());
  for (size_t p = 0; p < s.parts.size(); ++p) {
    if (da.defined()) {  // dA_p = dxa_pᵀ · drop_p(x)
      apply_mask(x, s.keep[p], s.dropout, tmp, false);
      gemm({at(dxa, p * r), tmp.raw_data(), at_mut(da, p * r * k), r, k, m, rr, k, k, true, false,
            1.0, 0.0, dt},
           dxa, tmp, da);
    }
    if (dx.defined()) {  // dx += (dxa_p · A_p) ⊙ keep_p / (1 − p)
      gemm({at(dxa, p * r), at(a, p * r * k), tmp.raw_data(), m, k, r, rr, k, k, false, false, 1.0,
            0.0, dt},
           dxa, a, tmp);
      apply_mask(tmp, s.keep[p], s.dropout, dx, true);
    }
  }
}

std::vector<Tensor> LoraLinearNode::backward(const std::vector<Tensor>& g) {
  const Tensor& x = x_.get();
  Tensor dy = g[0].to(x.dtype()).contiguous().view({x.size(0), n_});  // [M, N]
  std::vector<Tensor> out(3 + 2 * ad_.size());
  base_backward(dy, out[0], out[1], out[2]);
  for (size_t i = 0; i < ad_.size(); ++i)
    adapter_backward(dy, i, out[0], out[3 + 2 * i], out[4 + 2 * i]);
  if (out[0].defined()) out[0] = out[0].view(x_shape_);
  return out;
}

}  // namespace

namespace {

// Adds the adapters into y [.., n] (the base's output, or zeros without a base: w undefined) and
// records the node.
Tensor add_adapters(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor y, int64_t n,
                    const std::vector<LoraAdapterInput>& adapters, OutputUse use) {
  const int64_t k = x.size(-1), m = x.numel() / (k > 0 ? k : 1);
  UNILLM_CHECK(k > 0, "[lora_linear] K = 0");
  for (size_t i = 0; i < adapters.size(); ++i) check_adapter(x, n, adapters[i], i);
  Tensor x2 = x.contiguous().view({m, k});  // [M, K]
  Tensor y2 = y.view({m, n});               // [M, N]
  std::vector<AdapterSaved> saved(adapters.size());
  std::vector<Tensor> inputs{x, w, bias};
  for (auto& ad : adapters) inputs.push_back(ad.a), inputs.push_back(ad.b);
  bool segmented = false;
  for (const auto& ad : adapters) {
    const int64_t end = ad.row_end < 0 ? m : ad.row_end;
    if (ad.row_begin < 0 || ad.row_begin > end || end > m)
      UNILLM_THROW(ShapeError, "[lora_linear] adapter rows [", ad.row_begin, ", ", ad.row_end,
                   ") are outside x's ", m, " rows");
    segmented = segmented || ad.row_begin != 0 || end != m;
  }
  UNILLM_CHECK(!segmented || !autograd::needs_grad(inputs),
               "[lora_linear] adapters on row ranges are for inference only (no gradients)");
  for (size_t i = 0; i < adapters.size(); ++i) {
    const int64_t lo = adapters[i].row_begin, hi = adapters[i].row_end < 0 ? m : adapters[i].row_end;
    if (hi <= lo) continue;
    if (lo == 0 && hi == m) {
      adapter_forward(x2, adapters[i], y2, saved[i], use);
    } else {  // the adapter's own rows: contiguous row views of x and y
      Tensor ys = y2.slice(0, lo, hi);
      adapter_forward(x2.slice(0, lo, hi), adapters[i], ys, saved[i], use);
    }
  }
  if (m > 0 && autograd::needs_grad(inputs)) {
    auto node = std::make_shared<LoraLinearNode>(x2, w.defined() ? w.contiguous() : Tensor(), n,
                                                 bias.defined(), std::move(saved));
    autograd::record(node, inputs, {&y});
  }
  return y;
}

}  // namespace

Tensor lora_linear(const Tensor& x, const Tensor& w, const Tensor& bias,
                   const std::vector<LoraAdapterInput>& adapters, OutputUse use) {
  if (adapters.empty()) return linear(x, w, bias, use);
  Tensor y;
  {
    autograd::NoGradGuard no_grad;
    y = linear(x, w, bias, use);  // checks x, W, b; fresh contiguous [.., N] (zeros: kGradOnly)
  }
  return add_adapters(x, w, bias, y, w.size(0), adapters, use);
}

Tensor lora_delta(const Tensor& x, int64_t n, const std::vector<LoraAdapterInput>& adapters,
                  OutputUse use) {
  check_defined(kOp, "x", x);
  if (!is_floating(x.dtype()) || (x.dtype() != DType::f32 && x.dtype() != DType::f64))
    UNILLM_THROW(DTypeError, "[lora_linear] x has dtype ", dtype_name(x.dtype()), ", expected f32 or f64");
  if (x.ndim() < 1) UNILLM_THROW(ShapeError, "[lora_linear] x is a scalar");
  Shape shape = x.shape();
  shape.back() = n;
  return add_adapters(x, Tensor(), Tensor(), Tensor::zeros(shape, x.dtype(), x.device()), n, adapters, use);
}

void lora_gemm_reference(const LoraGemmArgs& g) {
  for (int64_t i = 0; i < g.m; ++i)
    for (int64_t j = 0; j < g.n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < g.k; ++p) {
        const int64_t ia = g.trans_a ? p * g.lda + i : i * g.lda + p;
        const int64_t ib = g.trans_b ? j * g.ldb + p : p * g.ldb + j;
        s += load_scalar(g.a, g.dtype, ia) * load_scalar(g.b, g.dtype, ib);
      }
      const int64_t ic = i * g.ldc + j;
      const double c = g.beta == 0.0 ? 0.0 : g.beta * load_scalar(g.c, g.dtype, ic);
      store_scalar(g.c, g.dtype, ic, c + g.alpha * s);
    }
}

void strided_gemm(LoraGemmArgs g, const Tensor& ta, const Tensor& tb, const Tensor& tc) {
  if (g.m == 0 || g.n == 0) return;
  KernelCall<LoraGemmArgs>("lora_gemm", tc.device(), g.dtype, g)
      .in(ta, &g.a).in(tb, &g.b).inout(tc, &g.c).run(lora_gemm_reference);
}

uint64_t lora_part_seed(uint64_t seed, size_t part) {
  return seed ^ (0xD1B54A32D192ED03ull * (static_cast<uint64_t>(part) + 1));
}

void lora_dropout_mask(uint64_t seed, double p, int64_t rows, int64_t cols, uint8_t* keep, int64_t first_row) {
  // keep when a 32-bit uniform u satisfies u >= p · 2^32, i.e. with probability 1 − p.
  const auto threshold = static_cast<uint64_t>(std::ldexp(p, 32));
  parallel_for(rows, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t row = lo; row < hi; ++row) {
      Rng rng(seed ^ (0x9E3779B97F4A7C15ull * static_cast<uint64_t>(first_row + row + 1)));
      uint8_t* out = keep + row * cols;
      for (int64_t c = 0; c < cols; c += 2) {
        const uint64_t v = rng.next_u64();
        out[c] = (v & 0xFFFFFFFFull) >= threshold;
        if (c + 1 < cols) out[c + 1] = (v >> 32) >= threshold;
      }
    }
  });
}

}  // namespace unillm::ops
