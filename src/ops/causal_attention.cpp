// causal_attention: checks, dispatch (kernel key = q's dtype) of the forward and backward
// kernels, the autograd node (saves q, k, v, segment ids, out and the row log-sum-exp) and the
// per-row double-precision references.
#include "ops/causal_attention.h"

#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "autograd/node.h"
#include "ops/dispatch.h"
#include "ops/kernel_call.h"
#include "ops/plugin_args.h"

namespace unillm::ops {
namespace {

constexpr const char* kOp = "causal_attention";
constexpr const char* kBackwardOp = "causal_attention_backward";

void check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& seg) {
  check_defined(kOp, "q", q);
  check_defined(kOp, "k", k);
  check_defined(kOp, "v", v);
  check_f32_or_f64(kOp, "q", q);
  check_ndim(kOp, "q", q, 4);
  check_ndim(kOp, "k", k, 4);
  check_dtype(kOp, "k", k, q.dtype());
  check_dtype(kOp, "v", v, q.dtype());
  check_same_device(kOp, q, k);
  check_same_device(kOp, q, v);
  if (v.shape() != k.shape())
    UNILLM_THROW(ShapeError, "[causal_attention] v has shape ", shape_str(v.shape()),
                 ", expected k's ", shape_str(k.shape()));
  if (k.size(0) != q.size(0) || k.size(1) != q.size(1) || k.size(3) != q.size(3))
    UNILLM_THROW(ShapeError, "[causal_attention] k has shape ", shape_str(k.shape()),
                 ", expected [", q.size(0), ", ", q.size(1), ", Hkv, ", q.size(3), "] for q ",
                 shape_str(q.shape()));
  if (k.size(2) == 0 || q.size(2) % k.size(2) != 0)
    UNILLM_THROW(ShapeError, "[causal_attention] q has ", q.size(2),
                 " heads, not a multiple of the ", k.size(2), " kv heads");
  if (!seg.defined()) return;
  check_dtype(kOp, "segment_ids", seg, DType::i32);  // any device: moved to q's
  if (seg.ndim() != 2 || seg.size(0) != q.size(0) || seg.size(1) != q.size(1))
    UNILLM_THROW(ShapeError, "[causal_attention] segment_ids has shape ", shape_str(seg.shape()),
                 ", expected [", q.size(0), ", ", q.size(1), "]");
}

const int32_t* seg_ptr(const Tensor& seg) { return seg.defined() ? seg.data<int32_t>() : nullptr; }

// Saves what backward needs; the forward's own tensors are never written after this.
class CausalAttentionNode : public autograd::Node {
 public:
  explicit CausalAttentionNode(const CausalAttentionSaved& s)
      : q_(autograd::SavedTensor::activation(s.q)),
        k_(autograd::SavedTensor::activation(s.k)),
        v_(autograd::SavedTensor::activation(s.v)),
        segment_ids_(s.segment_ids),
        out_(autograd::SavedTensor::activation(s.out)),
        lse_(s.lse),
        scale_(s.scale) {}
  std::string name() const override { return "CausalAttentionBackward"; }

  std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs) override {
    if (grad_outputs.empty() || !grad_outputs[0].defined()) return {Tensor(), Tensor(), Tensor()};
    const std::array<bool, 3> need{needs_input_grad(0), needs_input_grad(1), needs_input_grad(2)};
    CausalAttentionSaved s{
        q_.get(),   k_.get(),   v_.get(), segment_ids_.saved() ? segment_ids_.get() : Tensor(),
        out_.get(), lse_.get(), scale_};
    CausalAttentionGrads g = causal_attention_backward(s, grad_outputs[0], need);
    return {g.dq, g.dk, g.dv};
  }

  void release_saved() override {
    for (auto* t : {&q_, &k_, &v_, &segment_ids_, &out_, &lse_}) t->release();
  }

 private:
  autograd::SavedTensor q_, k_, v_, segment_ids_, out_, lse_;
  float scale_;
};

}  // namespace

CausalAttentionSaved causal_attention_forward(const Tensor& q_in, const Tensor& k_in,
                                              const Tensor& v_in, const Tensor& seg_in,
                                              float scale) {
  check_inputs(q_in, k_in, v_in, seg_in);
  CausalAttentionSaved s;
  s.q = q_in.contiguous();
  s.k = k_in.contiguous();
  s.v = v_in.contiguous();
  s.segment_ids = seg_in.defined() ? seg_in.contiguous().to(s.q.device()) : Tensor();
  s.scale = scale;
  const Tensor& q = s.q;
  s.out = Tensor::empty(q.shape(), q.dtype(), q.device());
  s.lse = Tensor::empty({q.size(0), q.size(1), q.size(2)}, q.dtype(), q.device());
  if (q.numel() == 0) return s;
  CausalAttentionArgs a{q.raw_data(),     s.k.raw_data(),   s.v.raw_data(), seg_ptr(s.segment_ids),
                        s.out.raw_data(), s.lse.raw_data(), q.size(0),      q.size(1),
                        q.size(2),        s.k.size(2),      q.size(3),      scale,
                        q.dtype()};
  KernelCall<CausalAttentionArgs>(kOp, q.device(), q.dtype(), a)
      .in(q, &a.q).in(s.k, &a.k).in(s.v, &a.v).in(s.segment_ids, &a.segment_ids)
      .out(s.out, &a.out).out(s.lse, &a.lse)
      .run(causal_attention_reference);
  return s;
}

CausalAttentionGrads causal_attention_backward(const CausalAttentionSaved& s,
                                               const Tensor& grad_out, std::array<bool, 3> need) {
  const Tensor& q = s.q;
  check_defined(kBackwardOp, "grad_out", grad_out);
  check_same_device(kBackwardOp, q, grad_out);
  if (grad_out.shape() != q.shape())
    UNILLM_THROW(ShapeError, "[causal_attention_backward] grad_out has shape ",
                 shape_str(grad_out.shape()), ", expected ", shape_str(q.shape()));
  Tensor go = grad_out.dtype() == q.dtype() ? grad_out.contiguous() : grad_out.to(q.dtype());
  CausalAttentionGrads g;
  if (need[0]) g.dq = Tensor::empty(q.shape(), q.dtype(), q.device());
  if (need[1]) g.dk = Tensor::empty(s.k.shape(), q.dtype(), q.device());
  if (need[2]) g.dv = Tensor::empty(s.v.shape(), q.dtype(), q.device());
  if (q.numel() == 0 || !(need[0] || need[1] || need[2])) {
    for (Tensor* t : {&g.dq, &g.dk, &g.dv})
      if (t->defined()) t->fill(0.0);
    return g;
  }
  auto ptr = [](Tensor& t) { return t.defined() ? t.raw_data() : nullptr; };
  CausalAttentionBackwardArgs a{q.raw_data(),
                                s.k.raw_data(),
                                s.v.raw_data(),
                                s.out.raw_data(),
                                s.lse.raw_data(),
                                go.raw_data(),
                                seg_ptr(s.segment_ids),
                                ptr(g.dq),
                                ptr(g.dk),
                                ptr(g.dv),
                                q.size(0),
                                q.size(1),
                                q.size(2),
                                s.k.size(2),
                                q.size(3),
                                s.scale,
                                q.dtype()};
  KernelCall<CausalAttentionBackwardArgs>(kBackwardOp, q.device(), q.dtype(), a)
      .in(q, &a.q).in(s.k, &a.k).in(s.v, &a.v).in(s.out, &a.out).in(s.lse, &a.lse)
      .in(go, &a.grad_out).in(s.segment_ids, &a.segment_ids)
      .out(g.dq, &a.grad_q).out(g.dk, &a.grad_k).out(g.dv, &a.grad_v)
      .run(causal_attention_backward_reference);
  return g;
}

Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& segment_ids, float scale, Tensor* lse) {
  CausalAttentionSaved s = causal_attention_forward(q, k, v, segment_ids, scale);
  Tensor out = s.out;
  if (lse) *lse = s.lse;
  if (autograd::needs_grad({q, k, v}))
    autograd::record(std::make_shared<CausalAttentionNode>(s), {q, k, v}, {&out});
  return out;
}

Tensor causal_attention_replay(const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& segment_ids, float scale, const Tensor& out_in,
                               const Tensor& lse) {
  check_inputs(q, k, v, segment_ids);
  const Shape lse_shape{q.size(0), q.size(1), q.size(2)};
  if (out_in.shape() != q.shape() || out_in.dtype() != q.dtype() || lse.shape() != lse_shape ||
      lse.dtype() != q.dtype())
    UNILLM_THROW(ShapeError, "[causal_attention_replay] out ", shape_str(out_in.shape()), " ",
                 dtype_name(out_in.dtype()), " and lse ", shape_str(lse.shape()),
                 " do not belong to q ", shape_str(q.shape()), " ", dtype_name(q.dtype()));
  CausalAttentionSaved s{q.contiguous(), k.contiguous(), v.contiguous(),
                         segment_ids.defined() ? segment_ids.contiguous() : Tensor(),
                         out_in.contiguous(), lse.contiguous(), scale};
  Tensor out = s.out.view(s.out.shape());  // a fresh handle: the node's output, not the stash's
  if (autograd::needs_grad({q, k, v}))
    autograd::record(std::make_shared<CausalAttentionNode>(s), {q, k, v}, {&out});
  return out;
}

namespace {

// One row's masked, scaled scores → probabilities p[j] (0 where masked) over keys 0..t; returns
// log Σ exp. Shared by the two references.
double reference_probs(const CausalAttentionArgs& a, int64_t b, int64_t t, int64_t h,
                       std::vector<double>& p) {
  const int64_t T = a.tokens, H = a.heads, Hkv = a.kv_heads, D = a.head_dim;
  const int64_t g = h / (H / Hkv), qo = ((b * T + t) * H + h) * D;
  const int32_t* seg = a.segment_ids ? a.segment_ids + b * T : nullptr;
  p.assign(static_cast<size_t>(t + 1), 0.0);
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j <= t; ++j) {
    if (seg && seg[j] != seg[t]) continue;
    const int64_t ko = ((b * T + j) * Hkv + g) * D;
    double dot = 0;
    for (int64_t i = 0; i < D; ++i)
      dot += load_scalar(a.q, a.dtype, qo + i) * load_scalar(a.k, a.dtype, ko + i);
    p[j] = dot * a.scale;
    mx = std::max(mx, p[j]);
  }
  double sum = 0;
  for (int64_t j = 0; j <= t; ++j) {
    const bool on = !seg || seg[j] == seg[t];
    p[j] = on ? std::exp(p[j] - mx) : 0.0;
    sum += p[j];
  }
  for (auto& e : p) e /= sum;
  return mx + std::log(sum);
}

}  // namespace

void causal_attention_reference(const CausalAttentionArgs& a) {
  const int64_t T = a.tokens, H = a.heads, Hkv = a.kv_heads, D = a.head_dim;
  std::vector<double> p;
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h) {
        const double lse = reference_probs(a, b, t, h, p);
        const int64_t g = h / (H / Hkv), qo = ((b * T + t) * H + h) * D;
        store_scalar(a.lse, a.dtype, (b * T + t) * H + h, lse);
        for (int64_t i = 0; i < D; ++i) {
          double acc = 0;
          for (int64_t j = 0; j <= t; ++j)
            if (p[j] != 0) acc += p[j] * load_scalar(a.v, a.dtype, ((b * T + j) * Hkv + g) * D + i);
          store_scalar(a.out, a.dtype, qo + i, acc);
        }
      }
}

void causal_attention_backward_reference(const CausalAttentionBackwardArgs& a) {
  const int64_t B = a.batch, T = a.tokens, H = a.heads, Hkv = a.kv_heads, D = a.head_dim;
  const CausalAttentionArgs fa{a.q, a.k, a.v, a.segment_ids, nullptr, nullptr, B, T,
                               H,   Hkv, D,   a.scale,       a.dtype};
  std::vector<double> dq(static_cast<size_t>(B * T * H * D)), dk(B * T * Hkv * D), dv(dk.size());
  std::vector<double> p, dp;
  auto ld = [&](const void* x, int64_t i) { return load_scalar(x, a.dtype, i); };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t) {
        reference_probs(fa, b, t, h, p);
        const int64_t g = h / (H / Hkv), qo = ((b * T + t) * H + h) * D;
        dp.assign(p.size(), 0.0);
        double dsum = 0;  // Σ_j p_j dp_j = rowsum(dO ∘ O)
        for (int64_t j = 0; j <= t; ++j) {
          if (p[j] == 0) continue;
          for (int64_t i = 0; i < D; ++i)
            dp[j] += ld(a.grad_out, qo + i) * ld(a.v, ((b * T + j) * Hkv + g) * D + i);
          dsum += p[j] * dp[j];
        }
        for (int64_t j = 0; j <= t; ++j) {
          if (p[j] == 0) continue;
          const double ds = p[j] * (dp[j] - dsum) * a.scale;
          const int64_t ko = ((b * T + j) * Hkv + g) * D;
          for (int64_t i = 0; i < D; ++i) {
            dq[qo + i] += ds * ld(a.k, ko + i);
            dk[ko + i] += ds * ld(a.q, qo + i);
            dv[ko + i] += p[j] * ld(a.grad_out, qo + i);
          }
        }
      }
  auto store = [&](void* dst, const std::vector<double>& src) {
    if (!dst) return;
    for (size_t i = 0; i < src.size(); ++i)
      store_scalar(dst, a.dtype, static_cast<int64_t>(i), src[i]);
  };
  store(a.grad_q, dq);
  store(a.grad_k, dk);
  store(a.grad_v, dv);
}

}  // namespace unillm::ops
