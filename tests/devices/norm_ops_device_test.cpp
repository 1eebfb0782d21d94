// The reference plugin's own kernels of rms_norm, rope, swiglu, softmax (forward and backward)
// and the optimizer loops (adamw, sum_squares, scale): each op × dtype against the f64 oracle
// through the device harness, the optimizer ops against the CPU directly, odd and non-contiguous
// shapes, and a check that none of them takes the host fallback any more.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "autograd/node.h"
#include "core/registry.h"
#include "devices/device_op_util.h"
#include "ops/cast.h"
#include "ops/optimizer.h"
#include "ops/rms_norm.h"
#include "ops/rope.h"
#include "ops/softmax.h"
#include "ops/swiglu.h"

namespace unillm {
namespace {

using devtest::Case;
using devtest::random;

constexpr double kTolF32 = 1e-5, kTolF64 = 1e-12;

double tol_of(DType t) { return t == DType::f64 ? kTolF64 : kTolF32; }

// Llama's default inverse frequencies for a rotated width of rot_dim.
std::vector<float> inv_freq(int64_t rot_dim) {
  ops::RopeConfig c;
  c.rot_dim = rot_dim;
  return ops::rope_inv_freq(c);
}

// One side of a run for the report below: the output, then every input gradient, on the host.
std::vector<std::vector<double>> run_for_report(const Case& c, const devtest::OpFn& fn,
                                                bool oracle) {
  std::vector<Tensor> leaves;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const Tensor& t = c.inputs[i];
    const bool kept = std::count(c.keep_dtype.begin(), c.keep_dtype.end(), i) > 0;
    const bool fl = is_floating(t.dtype()) && !kept;
    Tensor l = !oracle ? t.to(devtest::ref_device()) : fl ? ops::cast(t, DType::f64) : t.clone();
    if (c.grads && fl) l.set_requires_grad(true);
    leaves.push_back(l);
  }
  Tensor y = fn(leaves);
  std::vector<std::vector<double>> out{devtest::host(y)};
  if (!c.grads) return out;
  Tensor g = random(y.shape(), 99, y.dtype());  // the harness's output gradient
  autograd::backward(y, oracle ? g : g.to(y.device()));
  for (const Tensor& l : leaves)
    if (l.requires_grad()) out.push_back(devtest::host(l.grad()));
  return out;
}

// The harness's check, then the ref device's largest relative difference from the oracle over
// the output and the input gradients, printed for the record (and checked against the tolerance).
void check(const std::string& what, const Case& c, const devtest::OpFn& fn) {
  devtest::expect_matches_oracle(what, c, fn);
  const auto ref = run_for_report(c, fn, false), oracle = run_for_report(c, fn, true);
  ASSERT_EQ(ref.size(), oracle.size()) << what;
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i)
    worst = std::max(worst, devtest::max_rel_diff(ref[i], oracle[i]));
  std::printf("[ max-rel  ] %s: %.3g\n", what.c_str(), worst);
  EXPECT_LE(worst, c.tol) << what;
}

// Loads the CPU backend and the plugins before a test makes its first tensor (devtest::random
// does not).
class NormOpsOnDevice : public ::testing::Test {
 protected:
  void SetUp() override { devtest::ref_device(); }
};

std::string name(const char* op, DType x, const Shape& s) {
  return std::string(op) + " " + dtype_name(x) + " " + shape_str(s);
}

TEST_F(NormOpsOnDevice, RmsNormEveryWeightDtype) {
  struct Combo {
    DType x, w;
  };
  const std::vector<Combo> combos = {{DType::f32, DType::f32},
                                     {DType::f32, DType::bf16},
                                     {DType::f32, DType::f16},
                                     {DType::f64, DType::f64}};
  // rows not a multiple of anything, dim 1, a 3-d x, and a wider row
  const std::vector<Shape> shapes = {{7, 13}, {5, 1}, {2, 3, 5}, {3, 257}};
  for (const Combo& k : combos) {
    for (const Shape& s : shapes) {
      Case c{{random(s, 1, k.x), random({s.back()}, 2, k.w)}, true, tol_of(k.x), {}};
      check(name("rms_norm", k.x, s) + " w " + dtype_name(k.w), c,
            [](const auto& in) { return ops::rms_norm(in[0], in[1], 1e-5f); });
    }
  }
}

TEST_F(NormOpsOnDevice, RopeFullAndPartialRotation) {
  struct Geometry {
    int64_t n, heads, head_dim, rot_dim;
  };
  // full rotation; partial rotary (the tail copied); one head of width 2
  const std::vector<Geometry> geometries = {{5, 2, 16, 16}, {7, 3, 10, 6}, {3, 1, 2, 2}};
  for (DType dt : {DType::f32, DType::f64}) {
    for (const Geometry& g : geometries) {
      std::vector<int32_t> pos(static_cast<size_t>(g.n));
      for (int64_t i = 0; i < g.n; ++i)
        pos[static_cast<size_t>(i)] = static_cast<int32_t>(7 * i % 23);
      const std::vector<float> f = inv_freq(g.rot_dim);
      Case c{{random({g.n, g.heads, g.head_dim}, 3, dt), Tensor::from_ints(pos, {g.n})},
             true,
             tol_of(dt),
             {1}};
      check(name("rope", dt, {g.n, g.heads, g.head_dim}) + " rot " + std::to_string(g.rot_dim), c,
            [f](const auto& in) { return ops::rope(in[0], in[1].to(Device{}), f); });
    }
  }
}

// For f32 the angle is float(p)·f rounded to f32 and cos/sin are f32 (kernel_args.h): at large
// positions that rounding moves the result by far more than an ulp, so the ref device matches
// the CPU only if it rounds the same way (the f64 oracle, with exact angles, does not).
TEST_F(NormOpsOnDevice, RopeF32RoundsTheAngleLikeTheCpu) {
  const std::vector<int32_t> pos = {1000003, 65535, 98301, 0, -777777};
  const std::vector<float> f = inv_freq(8);
  const Tensor x = random({5, 2, 8}, 4), p = Tensor::from_ints(pos, {5});
  const std::vector<double> cpu = devtest::host(ops::rope(x, p, f));
  const std::vector<double> ref = devtest::host(ops::rope(x.to(devtest::ref_device()), p, f));
  const std::vector<double> exact = devtest::host(ops::rope(ops::cast(x, DType::f64), p, f));
  EXPECT_LE(devtest::max_rel_diff(ref, cpu), 1e-6);
  EXPECT_GT(devtest::max_rel_diff(cpu, exact), 1e-3) << "positions too small to tell";
  std::printf("[ max-rel  ] rope f32 large positions vs cpu: %.3g\n",
              devtest::max_rel_diff(ref, cpu));
}

TEST_F(NormOpsOnDevice, Swiglu) {
  const std::vector<Shape> shapes = {{7, 18}, {1, 2}, {2, 3, 10}, {4, 130}};
  for (DType dt : {DType::f32, DType::f64})
    for (const Shape& s : shapes)
      check(name("swiglu", dt, s), Case{{random(s, 5, dt)}, true, tol_of(dt), {}},
            [](const auto& in) { return ops::swiglu(in[0]); });
}

TEST_F(NormOpsOnDevice, Softmax) {
  const std::vector<Shape> shapes = {{7, 13}, {4, 1}, {2, 3, 5}, {3, 300}};
  for (DType dt : {DType::f32, DType::f64}) {
    for (const Shape& s : shapes) {
      check(name("softmax", dt, s), Case{{random(s, 6, dt)}, true, tol_of(dt), {}},
            [](const auto& in) { return ops::softmax(in[0]); });
    }
  }
  // Logits in ±100: exp overflows f32 unless the row's max is subtracted first.
  std::vector<float> big = random({3, 9}, 7).to_float_vector();
  for (float& e : big) e *= 100.0f;
  check("softmax f32 logits in ±100", Case{{Tensor::from_vector(big, {3, 9})}, true, kTolF32, {}},
        [](const auto& in) { return ops::softmax(in[0]); });
}

// A transposed view reaches the op non-contiguous; the op packs it (forward only: views carry no
// autograd).
TEST_F(NormOpsOnDevice, NonContiguousInputs) {
  for (DType dt : {DType::f32, DType::f64}) {
    const double tol = tol_of(dt);
    check(name("rms_norm transposed", dt, {6, 9}),
          Case{{random({6, 9}, 8, dt), random({6}, 9, dt)}, false, tol, {}},
          [](const auto& in) { return ops::rms_norm(in[0].transpose(0, 1), in[1], 1e-6f); });
    check(name("swiglu transposed", dt, {10, 5}), Case{{random({10, 5}, 10, dt)}, false, tol, {}},
          [](const auto& in) { return ops::swiglu(in[0].transpose(0, 1)); });
    check(name("softmax transposed", dt, {6, 9}), Case{{random({6, 9}, 11, dt)}, false, tol, {}},
          [](const auto& in) { return ops::softmax(in[0].transpose(0, 1)); });
    const std::vector<float> f = inv_freq(4);
    check(name("rope transposed", dt, {3, 4, 6}),
          Case{{random({3, 4, 6}, 12, dt), Tensor::from_ints({2, 0, 5, 9}, {4})}, false, tol, {1}},
          [f](const auto& in) { return ops::rope(in[0].transpose(0, 1), in[1].to(Device{}), f); });
  }
}

// ---- the optimizer ops: no autograd, so CPU and device are run side by side -----------------

std::vector<float> floats(const Tensor& t) { return t.to(Device{}).to_float_vector(); }

// A 1-d f32 tensor of n values that are squares of uniform ones (a second moment is >= 0).
Tensor squares(int64_t n, uint64_t seed) {
  std::vector<float> v = random({n}, seed).to_float_vector();
  for (float& e : v) e *= e;
  return Tensor::from_vector(v, {n});
}

// |a − b| / |b| at its largest, and how many elements differ in their bits.
struct Diff {
  double rel = 0;
  int64_t differing = 0;
};
Diff diff(const std::vector<float>& a, const std::vector<float>& b) {
  Diff d;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) ++d.differing;
    const double den = std::max(std::fabs(static_cast<double>(b[i])), 1e-30);
    d.rel = std::max(d.rel, std::fabs(static_cast<double>(a[i]) - b[i]) / den);
  }
  return d;
}

// Slices [lead, lead + n) of an arena on each side, as the optimizer's flat arenas hand them out
// (contiguous, at an offset); elements around the slice must stay untouched.
struct Arena {
  Tensor all, part;
};
Arena arena(const Tensor& init, int64_t lead, int64_t n, Device d) {
  Arena a{init.to(d), Tensor()};
  a.part = a.all.slice(0, lead, lead + n);
  return a;
}

TEST_F(NormOpsOnDevice, AdamWMatchesTheCpu) {
  const Device dev = devtest::ref_device();
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{4099}}) {
    const int64_t lead = 3, total = n + 5;
    std::vector<Arena> cpu, ref;  // p, m, v
    const std::vector<Tensor> init = {random({total}, 20), random({total}, 21), squares(total, 22)};
    for (const Tensor& t : init) {
      cpu.push_back(arena(t, lead, n, Device{}));
      ref.push_back(arena(t, lead, n, dev));
    }
    const float lr = 1e-3f, wd = 0.1f, b1 = 0.9f, b2 = 0.999f;
    for (int step = 1; step <= 3; ++step) {
      ops::AdamWScalars s;
      s.decay = 1.0f - lr * wd;
      s.step_size = lr / (1.0f - std::pow(b1, static_cast<float>(step)));
      s.sqrt_bc2 = std::sqrt(1.0f - std::pow(b2, static_cast<float>(step)));
      const Tensor g = random({n}, 30 + static_cast<uint64_t>(step));
      ops::adamw_update(cpu[0].part, g, cpu[1].part, cpu[2].part, s);
      ops::adamw_update(ref[0].part, g.to(dev), ref[1].part, ref[2].part, s);
    }
    const char* names[] = {"p", "m", "v"};
    for (size_t k = 0; k < 3; ++k) {
      const Diff d = diff(floats(ref[k].all), floats(cpu[k].all));
      std::printf("[ max-rel  ] adamw n=%lld %s: %.3g (%lld of %lld not bit-identical)\n",
                  static_cast<long long>(n), names[k], d.rel, static_cast<long long>(d.differing),
                  static_cast<long long>(total));
      EXPECT_LE(d.rel, 1e-6) << "adamw n=" << n << " " << names[k];
      EXPECT_EQ(floats(ref[k].all)[0], init[k].to_float_vector()[0]) << "wrote before the slice";
      EXPECT_EQ(floats(ref[k].all).back(), init[k].to_float_vector().back()) << "wrote past it";
    }
  }
}

TEST_F(NormOpsOnDevice, SumSquaresEveryChunkCount) {
  const Device dev = devtest::ref_device();
  const int64_t chunk = ops::kSumSquaresChunk;
  // smaller than a chunk; exactly one; spanning 3 chunks (the last one partial)
  for (int64_t n : {int64_t{1}, int64_t{1001}, chunk, 2 * chunk + 4097}) {
    const Tensor x = random({n + 2}, 40).slice(0, 2, n + 2);  // at an offset
    const double cpu = ops::sum_squares(x);
    const double ref = ops::sum_squares(x.to(dev));
    const std::vector<float> v = x.to_float_vector();
    double naive = 0;  // independent: one running sum over everything
    for (float e : v) naive += static_cast<double>(e) * e;
    const double rel = std::fabs(ref - cpu) / cpu;
    std::printf("[ max-rel  ] sum_squares n=%lld vs cpu: %.3g, vs one running sum: %.3g\n",
                static_cast<long long>(n), rel, std::fabs(ref - naive) / naive);
    EXPECT_LE(rel, 1e-12) << "n=" << n;
    EXPECT_LE(std::fabs(ref - naive) / naive, 1e-12) << "n=" << n;
  }
}

TEST_F(NormOpsOnDevice, ScaleIsExact) {
  const Device dev = devtest::ref_device();
  for (int64_t n : {int64_t{1}, int64_t{4099}}) {
    const Tensor init = random({n + 4}, 50);
    Arena cpu = arena(init, 1, n, Device{}), ref = arena(init, 1, n, dev);
    ops::scale_(cpu.part, 0.37f);
    ops::scale_(ref.part, 0.37f);
    EXPECT_EQ(floats(ref.all), floats(cpu.all)) << "n=" << n;
    EXPECT_EQ(floats(ref.all)[0], init.to_float_vector()[0]) << "wrote before the slice";
  }
}

// ---- no host fallback left ------------------------------------------------------------------

struct OpCase {
  std::string what;
  std::vector<Tensor> inputs;  // CPU tensors
  devtest::OpFn fn;
};

// Every op × key dtype of this group that has autograd.
std::vector<OpCase> autograd_cases() {
  std::vector<OpCase> cases;
  for (DType w : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    const DType x = w == DType::f64 ? DType::f64 : DType::f32;
    cases.push_back({std::string("rms_norm w ") + dtype_name(w),
                     {random({3, 8}, 60, x), random({8}, 61, w)},
                     [](const auto& in) { return ops::rms_norm(in[0], in[1], 1e-5f); }});
  }
  const std::vector<float> f = inv_freq(8);
  for (DType dt : {DType::f32, DType::f64}) {
    const std::string d = dtype_name(dt);
    cases.push_back({"rope " + d,
                     {random({3, 2, 8}, 62, dt), Tensor::from_ints({4, 1, 0}, {3})},
                     [f](const auto& in) { return ops::rope(in[0], in[1].to(Device{}), f); }});
    cases.push_back({"swiglu " + d, {random({3, 10}, 63, dt)}, [](const auto& in) {
                       return ops::swiglu(in[0]);
                     }});
    cases.push_back({"softmax " + d, {random({3, 10}, 64, dt)}, [](const auto& in) {
                       return ops::softmax(in[0]);
                     }});
  }
  return cases;
}

// The forward on device d, then the recorded node's backward called directly (the engine would
// also clone each gradient into its leaf, a "copy", which is another group's kernel). Returns the
// output and the input gradients on the host.
std::vector<std::vector<double>> forward_backward(const OpCase& c, Device d) {
  std::vector<Tensor> leaves;
  for (const Tensor& t : c.inputs) {
    Tensor l = d.is_cpu() ? t.clone() : t.to(d);
    if (is_floating(t.dtype())) l.set_requires_grad(true);
    leaves.push_back(l);
  }
  Tensor y = c.fn(leaves);
  std::vector<std::vector<double>> out{devtest::host(y)};
  const Tensor g = random(y.shape(), 99, y.dtype());
  for (const Tensor& dx : y.grad_fn()->backward({d.is_cpu() ? g : g.to(d)}))
    if (dx.defined()) out.push_back(devtest::host(dx));
  return out;
}

TEST_F(NormOpsOnDevice, NoneFallsBackToTheHost) {
  const Device dev = devtest::ref_device();
  for (const OpCase& c : autograd_cases()) {
    std::vector<std::vector<double>> ref;
    {
      devtest::FallbackPolicy refused(KernelRegistry::Fallback::error);
      ASSERT_NO_THROW(ref = forward_backward(c, dev)) << c.what;
    }
    const auto cpu = forward_backward(c, Device{});
    ASSERT_EQ(ref.size(), cpu.size()) << c.what;
    for (size_t i = 0; i < ref.size(); ++i)
      EXPECT_LE(devtest::max_rel_diff(ref[i], cpu[i]), 1e-5) << c.what << " result " << i;
  }
  devtest::FallbackPolicy refused(KernelRegistry::Fallback::error);
  const Tensor p = random({9}, 70).to(dev), g = random({9}, 71).to(dev);
  const Tensor m = random({9}, 72).to(dev), v = squares(9, 73).to(dev);
  EXPECT_NO_THROW(ops::adamw_update(p, g, m, v, ops::AdamWScalars{})) << "adamw";
  EXPECT_NO_THROW(ops::sum_squares(p)) << "sum_squares";
  EXPECT_NO_THROW(ops::scale_(p, 0.5f)) << "scale";
  // The refusal is in force: the plugin built without rms_norm cannot run it.
  const Device partial = devtest::partial_device();
  EXPECT_THROW(ops::rms_norm(random({2, 4}, 74).to(partial), random({4}, 75).to(partial), 1e-5f),
               NotImplemented);
}

}  // namespace
}  // namespace unillm
