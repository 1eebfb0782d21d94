// causal_attention (training): forward against a naive oracle that builds each row's mask
// explicitly (f64 and f32; no segments, packed segments, a padding-like segment, length-1
// segments, GQA 1/2/4, T not a multiple of the tiles); backward against central differences in
// f64, f32 kernels against the f64 reference, packed rows against separate samples, autograd
// wiring and thread-count independence.
#include <cstring>

#include "autograd/engine.h"
#include "core/parallel.h"
#include "op_test_util.h"
#include "ops/causal_attention.h"

namespace unillm {
namespace {

struct Case {
  int64_t B, T, H, Hkv, D;
  std::vector<int32_t> seg;  // [B·T] or empty (plain causal)
};

struct Inputs {
  Tensor q, k, v, seg;
};

Inputs make_inputs(const Case& c, DType t, uint64_t seed) {
  Inputs in;
  in.q = optest::randn({c.B, c.T, c.H, c.D}, t, seed, 1.5);
  in.k = optest::randn({c.B, c.T, c.Hkv, c.D}, t, seed + 1, 1.5);
  in.v = optest::randn({c.B, c.T, c.Hkv, c.D}, t, seed + 2);
  if (!c.seg.empty()) in.seg = Tensor::from_ints(c.seg, {c.B, c.T});
  return in;
}

// Ids 1, 2, ... for runs of the given lengths (cycled), then `pad` tokens of id 0 at the end.
std::vector<int32_t> segments(int64_t T, const std::vector<int64_t>& lengths, int64_t pad) {
  std::vector<int32_t> s;
  for (int32_t id = 1, i = 0; static_cast<int64_t>(s.size()) < T - pad; ++id, ++i)
    for (int64_t n = 0; n < lengths[i % lengths.size()] && static_cast<int64_t>(s.size()) < T - pad;
         ++n)
      s.push_back(id);
  s.resize(T, 0);
  return s;
}

std::vector<int32_t> repeat(const std::vector<int32_t>& row, int64_t B) {
  std::vector<int32_t> s;
  for (int64_t b = 0; b < B; ++b) s.insert(s.end(), row.begin(), row.end());
  return s;
}

struct OracleOut {
  std::vector<double> out, lse;
};

// Full softmax per row over an explicit [T, T] mask.
OracleOut oracle(const Case& c, const Inputs& in, double scale) {
  const std::vector<double> q = optest::doubles(in.q), k = optest::doubles(in.k),
                            v = optest::doubles(in.v);
  OracleOut o{std::vector<double>(q.size()), std::vector<double>(c.B * c.T * c.H)};
  for (int64_t b = 0; b < c.B; ++b) {
    std::vector<char> mask(c.T * c.T);
    for (int64_t t = 0; t < c.T; ++t)
      for (int64_t j = 0; j < c.T; ++j)
        mask[t * c.T + j] = j <= t && (c.seg.empty() || c.seg[b * c.T + j] == c.seg[b * c.T + t]);
    for (int64_t t = 0; t < c.T; ++t)
      for (int64_t h = 0; h < c.H; ++h) {
        const int64_t g = h * c.Hkv / c.H, row = (b * c.T + t) * c.H + h;
        std::vector<double> w(c.T, 0.0);
        double mx = -1e300, sum = 0;
        for (int64_t j = 0; j < c.T; ++j) {
          if (!mask[t * c.T + j]) continue;
          for (int64_t i = 0; i < c.D; ++i)
            w[j] += q[row * c.D + i] * k[((b * c.T + j) * c.Hkv + g) * c.D + i] * scale;
          mx = std::max(mx, w[j]);
        }
        for (int64_t j = 0; j < c.T; ++j)
          sum += (w[j] = mask[t * c.T + j] ? std::exp(w[j] - mx) : 0);
        o.lse[row] = mx + std::log(sum);
        for (int64_t j = 0; j < c.T; ++j)
          for (int64_t i = 0; i < c.D; ++i)
            o.out[row * c.D + i] += w[j] / sum * v[((b * c.T + j) * c.Hkv + g) * c.D + i];
      }
  }
  return o;
}

float scale_for(const Case& c) { return 1.0f / std::sqrt(static_cast<float>(c.D)); }

// The f64 reference gradients for inputs of any float dtype (converted to f64 first).
ops::CausalAttentionGrads reference_grads(const Inputs& in, const Tensor& w, float scale) {
  Tensor q = in.q.to(DType::f64), k = in.k.to(DType::f64), v = in.v.to(DType::f64);
  Tensor go = w.to(DType::f64);
  ops::CausalAttentionGrads g{Tensor::empty(q.shape(), DType::f64),
                              Tensor::empty(k.shape(), DType::f64),
                              Tensor::empty(v.shape(), DType::f64)};
  ops::CausalAttentionBackwardArgs a{q.raw_data(),
                                     k.raw_data(),
                                     v.raw_data(),
                                     nullptr,
                                     nullptr,
                                     go.raw_data(),
                                     in.seg.defined() ? in.seg.data<int32_t>() : nullptr,
                                     g.dq.raw_data(),
                                     g.dk.raw_data(),
                                     g.dv.raw_data(),
                                     q.size(0),
                                     q.size(1),
                                     q.size(2),
                                     k.size(2),
                                     q.size(3),
                                     scale,
                                     DType::f64};
  ops::causal_attention_backward_reference(a);
  return g;
}

// |got - want| <= tol · max|want| + tol · |want| elementwise (a relative error that tolerates
// entries near zero).
void expect_rel(const Tensor& got, const Tensor& want, double tol) {
  std::vector<double> w = optest::doubles(want);
  double mx = 0;
  for (double e : w) mx = std::max(mx, std::fabs(e));
  optest::expect_near(got, w, tol * mx, tol);
}

class CausalAttentionTest : public optest::OpTest {
 protected:
  void check_forward(const Case& c, DType t, uint64_t seed) {
    Inputs in = make_inputs(c, t, seed);
    const float scale = scale_for(c);
    OracleOut want = oracle(c, in, scale);
    const double tol = t == DType::f32 ? 2e-5 : 1e-12;
    ops::CausalAttentionSaved s = ops::causal_attention_forward(in.q, in.k, in.v, in.seg, scale);
    optest::expect_near(s.out, want.out, tol, tol);
    optest::expect_near(s.lse, want.lse, tol, tol);
    optest::expect_near(ops::causal_attention(in.q, in.k, in.v, in.seg, scale), want.out, tol, tol);
    if (t != DType::f64) return;
    Tensor out = Tensor::empty(in.q.shape(), t), lse = Tensor::empty(s.lse.shape(), t);
    ops::CausalAttentionArgs a{in.q.raw_data(),
                               in.k.raw_data(),
                               in.v.raw_data(),
                               in.seg.defined() ? in.seg.data<int32_t>() : nullptr,
                               out.raw_data(),
                               lse.raw_data(),
                               c.B,
                               c.T,
                               c.H,
                               c.Hkv,
                               c.D,
                               scale,
                               t};
    ops::causal_attention_reference(a);
    optest::expect_near(out, want.out, tol, tol);
    optest::expect_near(lse, want.lse, tol, tol);
  }
};

TEST_F(CausalAttentionTest, ForwardPlainCausalAllGqaRatios) {
  for (DType t : {DType::f64, DType::f32})
    for (int64_t group : {1, 2, 4})
      for (int64_t T : {1, 5, 70}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(t) << " group=" << group << " T=" << T);
        check_forward({2, T, 2 * group, 2, 20, {}}, t, 100 + T + group);
      }
}

TEST_F(CausalAttentionTest, ForwardWithSegments) {
  for (DType t : {DType::f64, DType::f32})
    for (int64_t group : {1, 2, 4}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << " group=" << group);
      const int64_t T = 131;
      // packed samples with length-1 segments, then a padding-like tail of id 0
      std::vector<int32_t> a = segments(T, {40, 1, 67, 1, 3}, 11);
      std::vector<int32_t> b = segments(T, {1, 1, 2, 90}, 0);
      a.insert(a.end(), b.begin(), b.end());
      check_forward({2, T, 2 * group, 2, 36, a}, t, 200 + group);
      // ids that come back after a gap attend across it (equality, not contiguity)
      check_forward({1, 9, group, 1, 8, {1, 1, 2, 2, 1, 3, 1, 2, 2}}, t, 210 + group);
    }
}

// Loss Σ out ∘ w through autograd on leaves; returns the leaves' gradients.
ops::CausalAttentionGrads autograd_grads(Inputs in, const Tensor& w, float scale) {
  in.q.set_requires_grad(true);
  in.k.set_requires_grad(true);
  in.v.set_requires_grad(true);
  Tensor out = ops::causal_attention(in.q, in.k, in.v, in.seg, scale);
  EXPECT_TRUE(out.grad_fn() != nullptr);
  autograd::backward(out, w);
  return {in.q.grad(), in.k.grad(), in.v.grad()};
}

double loss(const Inputs& in, const std::vector<double>& w, float scale) {
  std::vector<double> o = optest::doubles(ops::causal_attention(in.q, in.k, in.v, in.seg, scale));
  double s = 0;
  for (size_t i = 0; i < o.size(); ++i) s += o[i] * w[i];
  return s;
}

TEST_F(CausalAttentionTest, BackwardMatchesFiniteDifferencesF64) {
  const std::vector<int32_t> seg = {1, 1, 2, 2, 2, 0, 1, 2, 2, 3, 3, 3};
  for (const Case& c :
       {Case{2, 6, 4, 2, 3, seg}, Case{1, 7, 2, 1, 4, {}}, Case{2, 6, 2, 2, 3, seg}}) {
    SCOPED_TRACE(::testing::Message() << "H=" << c.H << " Hkv=" << c.Hkv);
    Inputs in = make_inputs(c, DType::f64, 300 + c.H);
    const float scale = 0.7f;
    Tensor w = optest::randn({c.B, c.T, c.H, c.D}, DType::f64, 310);
    const std::vector<double> wd = optest::doubles(w);
    ops::CausalAttentionGrads g = autograd_grads(in, w, scale);
    Tensor* xs[] = {&in.q, &in.k, &in.v};
    const Tensor* gs[] = {&g.dq, &g.dk, &g.dv};
    for (int x = 0; x < 3; ++x) {
      double* p = xs[x]->data<double>();
      std::vector<double> fd(static_cast<size_t>(xs[x]->numel()));
      for (size_t i = 0; i < fd.size(); ++i) {
        const double keep = p[i], eps = 1e-5;
        p[i] = keep + eps;
        const double up = loss(in, wd, scale);
        p[i] = keep - eps;
        fd[i] = (up - loss(in, wd, scale)) / (2 * eps);
        p[i] = keep;
      }
      SCOPED_TRACE(::testing::Message() << "input " << x);
      optest::expect_near(*gs[x], fd, 1e-8, 1e-6);
      // the reference agrees too
      const ops::CausalAttentionGrads r = reference_grads(in, w, scale);
      const Tensor* rs[] = {&r.dq, &r.dk, &r.dv};
      optest::expect_near(*rs[x], fd, 1e-8, 1e-6);
    }
  }
}

TEST_F(CausalAttentionTest, BackwardKernelsMatchReference) {
  const int64_t T = 100;
  std::vector<int32_t> seg = segments(T, {50, 1, 40, 2}, 5);
  const std::vector<int32_t> b1 = segments(T, {1, 98}, 1);
  seg.insert(seg.end(), b1.begin(), b1.end());
  for (DType t : {DType::f64, DType::f32})
    for (int64_t group : {1, 2, 4})
      for (bool with_seg : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << dtype_name(t) << " group=" << group << " seg=" << with_seg);
        const Case c{
            2, T, 2 * group, 2, t == DType::f32 ? 40 : 20, with_seg ? seg : std::vector<int32_t>{}};
        Inputs in = make_inputs(c, t, 400 + group);
        Tensor w = optest::randn({c.B, c.T, c.H, c.D}, t, 410);
        const float scale = scale_for(c);
        ops::CausalAttentionSaved s =
            ops::causal_attention_forward(in.q, in.k, in.v, in.seg, scale);
        ops::CausalAttentionGrads g = ops::causal_attention_backward(s, w);
        ops::CausalAttentionGrads r = reference_grads(in, w, scale);
        const double tol = t == DType::f32 ? 1e-4 : 1e-11;
        expect_rel(g.dq, r.dq, tol);
        expect_rel(g.dk, r.dk, tol);
        expect_rel(g.dv, r.dv, tol);
      }
}

// Two samples packed into one row with segment ids give the outputs and gradients of the samples
// run alone.
TEST_F(CausalAttentionTest, PackedRowEqualsSeparateSamples) {
  for (DType t : {DType::f64, DType::f32})
    for (int64_t n1 : {3, 70}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << " n1=" << n1);
      const int64_t n2 = n1 == 3 ? 2 : 45, T = n1 + n2, H = 4, Hkv = 2, D = 16;
      std::vector<int32_t> seg(T, 2);
      std::fill(seg.begin(), seg.begin() + n1, 1);
      const Case c{1, T, H, Hkv, D, seg};
      Inputs in = make_inputs(c, t, 500 + n1);
      Tensor w = optest::randn({1, T, H, D}, t, 510);
      const float scale = scale_for(c);
      const Tensor out = ops::causal_attention(in.q, in.k, in.v, in.seg, scale);
      ops::CausalAttentionGrads g = autograd_grads(in, w, scale);
      const double tol = t == DType::f32 ? 1e-6 : 1e-13;
      for (int part = 0; part < 2; ++part) {
        const int64_t lo = part == 0 ? 0 : n1, hi = part == 0 ? n1 : T;
        Inputs one{in.q.slice(1, lo, hi).contiguous(), in.k.slice(1, lo, hi).contiguous(),
                   in.v.slice(1, lo, hi).contiguous(), Tensor()};
        const Tensor w1 = w.slice(1, lo, hi).contiguous();
        const Tensor o1 = ops::causal_attention(one.q, one.k, one.v, Tensor(), scale);
        ops::CausalAttentionGrads g1 = autograd_grads(one, w1, scale);
        optest::expect_near(out.slice(1, lo, hi), optest::doubles(o1), tol, tol);
        optest::expect_near(g.dq.slice(1, lo, hi), optest::doubles(g1.dq), tol, tol);
        optest::expect_near(g.dk.slice(1, lo, hi), optest::doubles(g1.dk), tol, tol);
        optest::expect_near(g.dv.slice(1, lo, hi), optest::doubles(g1.dv), tol, tol);
      }
    }
}

TEST_F(CausalAttentionTest, AutogradSkipsInputsWithoutGrad) {
  const Case c{1, 9, 4, 1, 8, {}};
  Inputs in = make_inputs(c, DType::f32, 600);
  Tensor w = optest::randn({1, 9, 4, 8}, DType::f32, 601);
  ops::CausalAttentionSaved s = ops::causal_attention_forward(in.q, in.k, in.v, in.seg, 0.5f);
  ops::CausalAttentionGrads only_q = ops::causal_attention_backward(s, w, {true, false, false});
  EXPECT_FALSE(only_q.dk.defined());
  EXPECT_FALSE(only_q.dv.defined());
  ops::CausalAttentionGrads only_v = ops::causal_attention_backward(s, w, {false, false, true});
  ops::CausalAttentionGrads all = ops::causal_attention_backward(s, w);
  EXPECT_EQ(testing::max_abs_diff(only_q.dq, all.dq), 0.0);
  EXPECT_EQ(testing::max_abs_diff(only_v.dv, all.dv), 0.0);

  Tensor k = in.k;
  in.q.set_requires_grad(true);
  Tensor out = ops::causal_attention(in.q, k, in.v, in.seg, 0.5f);
  autograd::backward(out, w);
  EXPECT_EQ(testing::max_abs_diff(in.q.grad(), all.dq), 0.0);
  EXPECT_FALSE(k.grad().defined());
}

// Forward and backward of case c on 1 and on `threads` threads: their out, lse, dq, dk and dv
// must be the same bits.
void expect_same_bits_on(int threads, const Case& c, uint64_t seed, float scale) {
  Inputs in = make_inputs(c, DType::f32, seed);
  Tensor w = optest::randn({c.B, c.T, c.H, c.D}, DType::f32, seed + 1);
  std::vector<Tensor> runs[2];
  for (int i = 0; i < 2; ++i) {
    optest::ThreadCount scoped(i == 0 ? 1 : threads);
    ops::CausalAttentionSaved s = ops::causal_attention_forward(in.q, in.k, in.v, in.seg, scale);
    ops::CausalAttentionGrads g = ops::causal_attention_backward(s, w);
    runs[i] = {s.out, s.lse, g.dq, g.dk, g.dv};
  }
  for (size_t j = 0; j < runs[0].size(); ++j)
    EXPECT_EQ(std::memcmp(runs[0][j].raw_data(), runs[1][j].raw_data(), runs[0][j].nbytes()), 0)
        << "tensor " << j << " (out, lse, dq, dk, dv)";
}

TEST_F(CausalAttentionTest, ResultsDoNotDependOnThreadCount) {
  expect_same_bits_on(3, Case{2, 100, 4, 2, 24, repeat(segments(100, {30, 1, 69}, 0), 2)}, 700, 0.3f);
}

// The backward runs fused (whole (b, kv head) tasks: 1 thread here) or in two passes (4 threads,
// too few tasks for them); both give the same bits, for plain causal MHA with odd sizes too.
TEST_F(CausalAttentionTest, FusedAndTwoPassBackwardAgree) {
  expect_same_bits_on(4, Case{4, 77, 3, 3, 20, {}}, 710, 0.4f);
}

TEST_F(CausalAttentionTest, BadShapesThrow) {
  Tensor q = optest::randn({1, 4, 3, 8}, DType::f32, 1),
         k = optest::randn({1, 4, 2, 8}, DType::f32, 2);
  optest::expect_throw_with<ShapeError>(
      [&] { ops::causal_attention(q, k, k, Tensor(), 1.0f); },
      "[causal_attention] q has 3 heads, not a multiple of the 2 kv heads");
  Tensor q4 = optest::randn({1, 4, 4, 8}, DType::f32, 3);
  optest::expect_throw_with<ShapeError>(
      [&] {
        ops::causal_attention(q4, k, k, Tensor::from_ints({1, 1, 1}, {1, 3}), 1.0f);
      },
      "[causal_attention] segment_ids has shape [1, 3], expected [1, 4]");
  Tensor k5 = optest::randn({1, 5, 2, 8}, DType::f32, 4);
  optest::expect_throw_with<ShapeError>([&] { ops::causal_attention(q4, k5, k5, Tensor(), 1.0f); },
                                        "[causal_attention] k has shape");
}

}  // namespace
}  // namespace unillm
