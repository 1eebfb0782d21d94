// Optimizer ops: checks, dispatch and the references (the CPU kernels are in backends/cpu).
#include "ops/optimizer.h"

#include <cmath>
#include <vector>

#include "ops/dispatch.h"
#include "ops/kernel_call.h"
#include "ops/plugin_args.h"

namespace unillm::ops {

namespace {
void check_slice(const char* op, const char* arg, const Tensor& t, int64_t n) {
  check_defined(op, arg, t);
  check_dtype(op, arg, t, DType::f32);
  if (!t.is_contiguous() || t.numel() != n)
    UNILLM_THROW(ShapeError, "[", op, "] ", arg, " must be contiguous with ", n, " elements");
}
}  // namespace

void adamw_update(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                  const AdamWScalars& s) {
  const int64_t n = p.numel();
  for (auto [name, t] : {std::pair{"p", &p}, {"g", &g}, {"m", &m}, {"v", &v}}) {
    check_slice("adamw", name, *t, n);
    check_same_device("adamw", p, *t);
  }
  if (n == 0) return;
  AdamWArgs a{nullptr, nullptr, nullptr, nullptr, n, s};
  KernelCall<AdamWArgs>("adamw", p.device(), DType::f32, a)
      .inout(p, &a.p).in(g, &a.g).inout(m, &a.m).inout(v, &a.v).run(adamw_reference);
}

void adamw_reference(const AdamWArgs& a) {
  for (int64_t i = 0; i < a.n; ++i) {
    const float pi = a.p[i] * a.s.decay;
    const float mi = a.s.beta1 * a.m[i] + (1.0f - a.s.beta1) * a.g[i];
    const float vi = a.s.beta2 * a.v[i] + (1.0f - a.s.beta2) * a.g[i] * a.g[i];
    a.m[i] = mi;
    a.v[i] = vi;
    a.p[i] = pi - a.s.step_size * mi / (std::sqrt(vi) / a.s.sqrt_bc2 + a.s.eps);
  }
}

double sum_squares(const Tensor& x) {
  check_slice("sum_squares", "x", x, x.numel());
  const int64_t n = x.numel(), chunks = (n + kSumSquaresChunk - 1) / kSumSquaresChunk;
  if (n == 0) return 0.0;
  Tensor partials = Tensor::empty({chunks}, DType::f64, x.device());
  SumSquaresArgs a{nullptr, nullptr, n, kSumSquaresChunk};
  KernelCall<SumSquaresArgs>("sum_squares", x.device(), DType::f32, a)
      .in(x, &a.x).out(partials, &a.partials).run(sum_squares_reference);
  const Tensor host = partials.device().is_cpu() ? partials : partials.to(Device{});
  const double* p = host.data<double>();
  double total = 0;
  for (int64_t c = 0; c < chunks; ++c) total += p[c];  // chunk order: deterministic
  return total;
}

void sum_squares_reference(const SumSquaresArgs& a) {
  for (int64_t c = 0; c * a.chunk < a.n; ++c) {
    double s = 0;
    for (int64_t i = c * a.chunk; i < std::min(a.n, (c + 1) * a.chunk); ++i)
      s += static_cast<double>(a.x[i]) * a.x[i];
    a.partials[c] = s;
  }
}

void scale_(const Tensor& x, float factor) {
  check_slice("scale", "x", x, x.numel());
  if (x.numel() == 0) return;
  ScaleArgs a{nullptr, x.numel(), factor};
  KernelCall<ScaleArgs>("scale", x.device(), DType::f32, a).inout(x, &a.x).run(scale_reference);
}

void scale_reference(const ScaleArgs& a) {
  for (int64_t i = 0; i < a.n; ++i) a.x[i] *= a.factor;
}

}  // namespace unillm::ops
