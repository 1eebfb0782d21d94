// Helpers for the backward tests: leaves that require grad, Σ out·R losses, and a central-
// difference gradient check of every input of a function computed in f64.
#pragma once

#include <functional>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "op_test_util.h"

namespace unillm::optest {

inline Tensor leaf(const Shape& shape, DType dtype, uint64_t seed, double scale = 1.0) {
  Tensor t = randn(shape, dtype, seed, scale);
  t.set_requires_grad(true);
  return t;
}

// Σ a·r in double.
inline double dot(const Tensor& a, const Tensor& r) {
  std::vector<double> av = doubles(a), rv = doubles(r);
  double s = 0;
  for (size_t i = 0; i < av.size(); ++i) s += av[i] * rv[i];
  return s;
}

// Backpropagates R (random, out's shape and dtype) through fn() and compares each input's .grad
// with central differences of Σ fn()·R. inputs are contiguous f64 leaves that require grad.
inline void check_grads(const std::function<Tensor()>& fn, std::vector<Tensor> inputs,
                        uint64_t seed, double eps = 1e-6, double tol = 1e-6) {
  Tensor out = fn();
  Tensor r = randn(out.shape(), out.dtype(), seed);
  autograd::backward(out, r);
  autograd::NoGradGuard no_grad;
  for (size_t k = 0; k < inputs.size(); ++k) {
    Tensor& t = inputs[k];
    ASSERT_TRUE(t.grad().defined()) << "input " << k << " has no gradient";
    std::vector<double> g = doubles(t.grad());
    double* p = t.data<double>();
    int bad = 0;
    for (int64_t i = 0; i < t.numel(); ++i) {
      const double v = p[i];
      p[i] = v + eps;
      const double up = dot(fn(), r);
      p[i] = v - eps;
      const double down = dot(fn(), r);
      p[i] = v;
      const double num = (up - down) / (2 * eps);
      if (!(std::fabs(num - g[i]) <= tol * (1 + std::fabs(num))) && ++bad <= 5)
        ADD_FAILURE() << "input " << k << " element " << i << ": autograd " << g[i]
                      << ", finite differences " << num;
    }
    EXPECT_EQ(bad, 0) << "input " << k;
  }
}

// Elementwise closeness scaled by the largest magnitude of want (for GEMM-like sums whose terms
// cancel): |got − want| <= rel·(max|want| + |want|).
inline void expect_close_rel(const Tensor& got, const std::vector<double>& want, double rel) {
  double mx = 0;
  for (double w : want) mx = std::max(mx, std::fabs(w));
  expect_near(got, want, rel * mx, rel);
}

}  // namespace unillm::optest
