// dora_delta: checks, the forward per targeted part (strided "lora_gemm" GEMMs plus row-wise
// scaling loops), the row norms ‖W + sBA‖, and the DoraNode backward (see dora_linear.h).
#include "ops/dora_linear.h"

#include <cmath>
#include <memory>

#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "ops/dispatch.h"
#include "ops/kernel_call.h"
#include "ops/plugin_args.h"

namespace unillm::ops {
namespace {

constexpr const char* kOp = "dora";

// C = alpha·op(A)·op(B) + beta·C through the lora_gemm kernel (reference fallback).
void gemm(LoraGemmArgs g, const Tensor& ta, const Tensor& tb, const Tensor& tc) {
  if (g.m == 0 || g.n == 0) return;
  KernelCall<LoraGemmArgs>("lora_gemm", tc.device(), g.dtype, g)
      .in(ta, &g.a).in(tb, &g.b).inout(tc, &g.c).run(lora_gemm_reference);
}

// out = in ⊙ keep / (1 − p) (or += when accumulate), n elements of dtype f32/f64.
void masked(const Tensor& in, const std::vector<uint8_t>& keep, double p, Tensor& out,
            bool accumulate) {
  const int64_t n = in.numel();
  auto run = [&](auto* src, auto* dst) {
    using T = std::remove_pointer_t<decltype(dst)>;
    const T scale = static_cast<T>(1.0 / (1.0 - p));
    for (int64_t i = 0; i < n; ++i) {
      const T v = keep[i] ? src[i] * scale : T(0);
      dst[i] = accumulate ? dst[i] + v : v;
    }
  };
  if (in.dtype() == DType::f64)
    run(in.data<double>(), out.data<double>());
  else
    run(in.data<float>(), out.data<float>());
}

double get(const Tensor& t, int64_t i) { return load_scalar(t.raw_data(), t.dtype(), i); }

// fn(T{}) with T the element type of dt (f32 or f64): the row loops below run typed.
template <class Fn>
void typed(DType dt, Fn&& fn) {
  if (dt == DType::f64)
    fn(double{});
  else
    fn(float{});
}

// What forward keeps of one part for backward.
struct PartSaved {
  LoraPart part;
  Tensor wp, ap, bp;           // W_p [cols, K] (x's dtype), A_p [r, K], B_p [cols, r]
  autograd::SavedTensor xa, u;  // xa = x̃·A_pᵀ [M, r]; u = (x̃·W_pᵀ + s·xa·B_pᵀ) / n [M, cols]
  std::vector<double> g;       // m / n  [cols]
  std::vector<uint8_t> keep;   // [M·K] when dropout > 0
};

// x [M, K] contiguous, y [M, N] contiguous (zeros): writes part p's columns, fills st.
void part_forward(const Tensor& x, const Tensor& w, const DoraInput& in, size_t p, Tensor& y,
                  PartSaved& st) {
  const LoraAdapterInput& ad = in.lora;
  const LoraPart& pt = ad.parts[p];
  const int64_t m = x.size(0), k = x.size(1), n = y.size(1), r = ad.b.size(1), c = pt.cols;
  const auto pi = static_cast<int64_t>(p);
  const DType dt = x.dtype();
  st.part = pt;
  st.wp = w.slice(0, pt.col_begin, pt.col_begin + c).to(dt).contiguous();
  st.ap = ad.a.slice(0, pi * r, (pi + 1) * r).contiguous();
  st.bp = ad.b.slice(0, pt.b_row, pt.b_row + c).contiguous();
  Tensor xd = x;
  if (ad.dropout > 0) {
    st.keep.resize(static_cast<size_t>(m * k));
    lora_dropout_mask(lora_part_seed(ad.seed, p), ad.dropout, m, k, st.keep.data(), ad.mask_row_begin);
    xd = Tensor::empty({m, k}, dt, x.device());
    masked(x, st.keep, ad.dropout, xd, false);
  }
  LoraAdapterInput one{st.ap, st.bp, {{0, c, 0}}, ad.scaling};
  const Tensor norms = dora_row_norms(st.wp, one);  // [cols] f64
  Tensor xa = Tensor::empty({m, r}, dt, x.device());
  gemm({xd.raw_data(), st.ap.raw_data(), xa.raw_data(), m, r, k, k, k, r, false, true, 1.0, 0.0, dt},
       xd, st.ap, xa);
  Tensor base = Tensor::empty({m, c}, dt, x.device());  // x̃·W_pᵀ, then + s·xa·B_pᵀ
  gemm({xd.raw_data(), st.wp.raw_data(), base.raw_data(), m, c, k, k, k, c, false, true, 1.0, 0.0,
        dt},
       xd, st.wp, base);
  Tensor u = base.clone();
  gemm({xa.raw_data(), st.bp.raw_data(), u.raw_data(), m, c, r, r, r, c, false, true, ad.scaling,
        1.0, dt},
       xa, st.bp, u);
  st.g.resize(static_cast<size_t>(c));
  for (int64_t j = 0; j < c; ++j)
    st.g[j] = get(in.magnitude, pt.b_row + j) / norms.data<double>()[j];
  // y_p = (g − 1)·base + g·lora = g·u − base;  then u /= n for dm.
  const double* nv = norms.data<double>();
  typed(dt, [&](auto zero) {
    using T = decltype(zero);
    T *uv = u.data<T>(), *yv = y.data<T>() + pt.col_begin;
    const T* bv = base.data<T>();
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < c; ++j) {
        const int64_t e = i * c + j;
        yv[i * n + j] = static_cast<T>(st.g[j] * uv[e] - bv[e]);
        uv[e] = static_cast<T>(uv[e] / nv[j]);
      }
  });
  st.xa = autograd::SavedTensor::activation(xa);
  st.u = autograd::SavedTensor::activation(u);
}

class DoraNode : public autograd::Node {
 public:
  DoraNode(const Tensor& x, int64_t n, double scaling, double dropout, std::vector<PartSaved> parts)
      : x_(autograd::SavedTensor::activation(x)), x_shape_(x.shape()), n_(n), scaling_(scaling),
        dropout_(dropout), parts_(std::move(parts)) {}
  std::string name() const override { return "DoraNode"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override;
  void release_saved() override {
    x_.release();
    parts_.clear();
  }

 private:
  void part_backward(const Tensor& dy, size_t p, std::vector<Tensor>& out);
  autograd::SavedTensor x_;  // [M, K] contiguous
  Shape x_shape_;
  int64_t n_;
  double scaling_, dropout_;
  std::vector<PartSaved> parts_;
};

// Inputs: 0 x, 1 W (never), 2 A, 3 B, 4 m; out holds the (zero-initialised) dx, dA, dB, dm.
void DoraNode::part_backward(const Tensor& dy, size_t p, std::vector<Tensor>& out) {
  const PartSaved& s = parts_[p];
  const Tensor& x = x_.get();
  const int64_t m = x.size(0), k = x.size(1), c = s.part.cols, r = s.ap.size(0);
  const auto pi = static_cast<int64_t>(p);
  const DType dt = x.dtype();
  Tensor dyg = Tensor::empty({m, c}, dt, dy.device());  // g ⊙ dy_p
  Tensor dyb = Tensor::empty({m, c}, dt, dy.device());  // (g − 1) ⊙ dy_p
  const Tensor& u = s.u.get();
  typed(dt, [&](auto zero) {
    using T = decltype(zero);
    const T *dv = dy.data<T>() + s.part.col_begin, *uv = u.data<T>();
    T *gv = dyg.data<T>(), *bv = dyb.data<T>();
    std::vector<double> dm(static_cast<size_t>(c), 0.0);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < c; ++j) {
        const double d = dv[i * n_ + j];
        gv[i * c + j] = static_cast<T>(s.g[j] * d);
        bv[i * c + j] = static_cast<T>((s.g[j] - 1) * d);
        dm[j] += d * uv[i * c + j];
      }
    if (out[4].defined())
      for (int64_t j = 0; j < c; ++j) out[4].data<T>()[s.part.b_row + j] += static_cast<T>(dm[j]);
  });
  if (out[3].defined())  // dB_p = s·dygᵀ·xa   [cols, r]
    gemm({dyg.raw_data(), s.xa.get().raw_data(), out[3].slice(0, s.part.b_row, s.part.b_row + c).raw_data(),
          c, r, m, c, r, r, true, false, scaling_, 0.0, dt},
         dyg, s.xa.get(), out[3]);
  if (!out[2].defined() && !out[0].defined()) return;
  Tensor dxa = Tensor::empty({m, r}, dt, dy.device());  // s·dyg·B_p   [M, r]
  gemm({dyg.raw_data(), s.bp.raw_data(), dxa.raw_data(), m, r, c, c, r, r, false, false, scaling_,
        0.0, dt},
       dyg, s.bp, dxa);
  Tensor xd = x;
  if (dropout_ > 0) {
    xd = Tensor::empty({m, k}, dt, dy.device());
    masked(x, s.keep, dropout_, xd, false);
  }
  if (out[2].defined())  // dA_p = dxaᵀ·x̃   [r, K]
    gemm({dxa.raw_data(), xd.raw_data(), out[2].slice(0, pi * r, (pi + 1) * r).raw_data(), r, k, m,
          r, k, k, true, false, 1.0, 0.0, dt},
         dxa, xd, out[2]);
  if (!out[0].defined()) return;
  Tensor dxd = Tensor::empty({m, k}, dt, dy.device());  // dxa·A_p + dyb·W_p   [M, K]
  gemm({dxa.raw_data(), s.ap.raw_data(), dxd.raw_data(), m, k, r, r, k, k, false, false, 1.0, 0.0,
        dt},
       dxa, s.ap, dxd);
  gemm({dyb.raw_data(), s.wp.raw_data(), dxd.raw_data(), m, k, c, c, k, k, false, false, 1.0, 1.0,
        dt},
       dyb, s.wp, dxd);
  if (dropout_ > 0) {
    masked(dxd, s.keep, dropout_, out[0], true);
    return;
  }
  const int64_t total = m * k;
  typed(dt, [&](auto zero) {
    using T = decltype(zero);
    T* dst = out[0].data<T>();
    const T* src = dxd.data<T>();
    for (int64_t i = 0; i < total; ++i) dst[i] += src[i];
  });
}

std::vector<Tensor> DoraNode::backward(const std::vector<Tensor>& g) {
  const Tensor& x = x_.get();
  const Tensor dy = g[0].to(x.dtype()).contiguous().view({x.size(0), n_});  // [M, N]
  std::vector<Tensor> out(5);
  const DType dt = x.dtype();
  auto zeros_if = [&](size_t i, const Shape& shape) {
    if (needs_input_grad(i)) out[i] = Tensor::zeros(shape, dt, dy.device());
  };
  int64_t b_rows = 0;
  for (const auto& p : parts_) b_rows += p.part.cols;
  const int64_t r = parts_.empty() ? 0 : parts_[0].ap.size(0);
  zeros_if(0, {x.size(0), x.size(1)});
  zeros_if(2, {static_cast<int64_t>(parts_.size()) * r, x.size(1)});
  zeros_if(3, {b_rows, r});
  zeros_if(4, {b_rows});
  for (size_t p = 0; p < parts_.size(); ++p) part_backward(dy, p, out);
  if (out[0].defined()) out[0] = out[0].view(x_shape_);
  return out;
}

void check_inputs(const Tensor& x, const Tensor& w, const DoraInput& in) {
  check_defined(kOp, "x", x);
  check_defined(kOp, "W", w);
  check_f32_or_f64(kOp, "x", x);
  check_ndim(kOp, "W", w, 2);
  check_dtype(kOp, "A", in.lora.a, x.dtype());
  check_dtype(kOp, "B", in.lora.b, x.dtype());
  check_dtype(kOp, "magnitude", in.magnitude, x.dtype());
  if (!x.device().is_cpu() || !w.device().is_cpu())
    UNILLM_THROW(NotImplemented, "[dora] DoRA adapters run on the CPU only");
  if (x.ndim() < 1 || x.size(-1) != w.size(1))
    UNILLM_THROW(ShapeError, "[dora] x has shape ", shape_str(x.shape()), ", W ",
                 shape_str(w.shape()));
  if (w.requires_grad() && autograd::grad_enabled())
    UNILLM_THROW(NotImplemented, "[dora] the base weight must be frozen (no gradient for W)");
  const int64_t r = in.lora.b.size(1);
  const auto parts = static_cast<int64_t>(in.lora.parts.size());
  if (parts == 0 || in.lora.a.ndim() != 2 || in.lora.a.size(0) != parts * r ||
      in.lora.a.size(1) != x.size(-1))
    UNILLM_THROW(ShapeError, "[dora] A has shape ", shape_str(in.lora.a.shape()), ", expected [",
                 parts, " parts x rank ", r, ", ", x.size(-1), "]");
  if (in.magnitude.ndim() != 1 || in.magnitude.size(0) != in.lora.b.size(0))
    UNILLM_THROW(ShapeError, "[dora] magnitude has shape ", shape_str(in.magnitude.shape()),
                 ", expected [", in.lora.b.size(0), "] (B's rows)");
  for (const LoraPart& p : in.lora.parts)
    if (p.cols <= 0 || p.col_begin < 0 || p.col_begin + p.cols > w.size(0) || p.b_row < 0 ||
        p.b_row + p.cols > in.lora.b.size(0))
      UNILLM_THROW(ShapeError, "[dora] part [", p.col_begin, ", +", p.cols, ") with B row ",
                   p.b_row, " is outside W (", w.size(0), " rows) or B ",
                   shape_str(in.lora.b.shape()));
  if (!(in.lora.dropout >= 0.0 && in.lora.dropout < 1.0))
    UNILLM_THROW(ConfigError, "[dora] dropout ", in.lora.dropout, " outside [0, 1)");
}

}  // namespace

Tensor dora_delta(const Tensor& x, const Tensor& w, const DoraInput& in, OutputUse use) {
  check_inputs(x, w, in);
  const int64_t k = x.size(-1), n = w.size(0), m = x.numel() / k;
  Shape shape = x.shape();
  shape.back() = n;
  Tensor y = Tensor::zeros(shape, x.dtype(), x.device());
  const std::vector<Tensor> inputs{x, w, in.lora.a, in.lora.b, in.magnitude};
  const bool grad = autograd::needs_grad(inputs);
  const int64_t lo = in.lora.row_begin, hi = in.lora.row_end < 0 ? m : in.lora.row_end;
  if (lo < 0 || lo > hi || hi > m)
    UNILLM_THROW(ShapeError, "[dora] adapter rows [", lo, ", ", hi, ") are outside x's ", m, " rows");
  UNILLM_CHECK(!grad || (lo == 0 && hi == m),
               "[dora] adapters on row ranges are for inference only (no gradients)");
  if (hi == lo) return y;
  Tensor x2 = x.contiguous().view({m, k}).slice(0, lo, hi);  // [M', K] the adapter's rows
  Tensor y2 = y.view({m, n}).slice(0, lo, hi);                // [M', N]
  std::vector<PartSaved> saved(in.lora.parts.size());
  {
    autograd::NoGradGuard no_grad;
    for (size_t p = 0; p < in.lora.parts.size(); ++p) part_forward(x2, w, in, p, y2, saved[p]);
  }
  if (grad) {
    auto node = std::make_shared<DoraNode>(x2, n, in.lora.scaling, in.lora.dropout, std::move(saved));
    autograd::record(node, inputs, {&y});
  }
  if (use == OutputUse::kGradOnly) y.fill(0.0);
  return y;
}

Tensor dora_row_norms(const Tensor& w, const LoraAdapterInput& ad) {
  autograd::NoGradGuard no_grad;
  const int64_t k = w.size(1), r = ad.b.size(1);
  int64_t rows = 0;
  for (const LoraPart& p : ad.parts) rows += p.cols;
  Tensor out = Tensor::empty({rows}, DType::f64);
  const Tensor a = ad.a.to(Device{}).to(DType::f64).contiguous();
  const Tensor b = ad.b.to(Device{}).to(DType::f64).contiguous();
  const Tensor wh = w.to(Device{});
  for (size_t p = 0; p < ad.parts.size(); ++p) {
    const LoraPart& pt = ad.parts[p];
    const auto pi = static_cast<int64_t>(p);
    Tensor wp = wh.slice(0, pt.col_begin, pt.col_begin + pt.cols).to(DType::f64).contiguous();
    Tensor ba = Tensor::empty({pt.cols, k}, DType::f64);  // B_p·A_p
    gemm({b.data<double>() + pt.b_row * r, a.data<double>() + pi * r * k, ba.raw_data(), pt.cols,
          k, r, r, k, k, false, false, 1.0, 0.0, DType::f64},
         b, a, ba);
    const double* wv = wp.data<double>();
    const double* bav = ba.data<double>();
    for (int64_t j = 0; j < pt.cols; ++j) {
      double ss = 0;
      for (int64_t e = 0; e < k; ++e) {
        const double v = wv[j * k + e] + ad.scaling * bav[j * k + e];
        ss += v * v;
      }
      out.data<double>()[pt.b_row + j] = std::sqrt(ss);
    }
  }
  return out;
}

}  // namespace unillm::ops
