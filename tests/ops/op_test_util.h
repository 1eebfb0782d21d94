// Shared helpers for the op tests: random tensors, reading any tensor as doubles, an elementwise
// closeness check against an oracle computed in double, and a scoped OpenMP thread count.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/parallel.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "support/expect.h"

namespace unillm::optest {

// Runs the enclosing scope on n OpenMP threads; the previous count comes back when it ends, also
// when an ASSERT leaves the test early.
class ThreadCount {
 public:
  explicit ThreadCount(int n) : saved_(num_threads()) { set_omp_threads(n); }
  ~ThreadCount() { set_omp_threads(saved_); }
  ThreadCount(const ThreadCount&) = delete;
  ThreadCount& operator=(const ThreadCount&) = delete;

 private:
  int saved_;
};

// Normal(0, scale²) values, rounded through dtype (so the oracle sees exactly what the op sees).
inline Tensor randn(const Shape& shape, DType dtype, uint64_t seed, double scale = 1.0) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (auto& e : v) e = static_cast<float>(rng.normal() * scale);
  return Tensor::from_vector(v, shape, dtype);
}

inline std::vector<double> doubles(const Tensor& t) {
  Tensor c = t.contiguous();
  std::vector<double> out(static_cast<size_t>(c.numel()));
  convert_elements(c.raw_data(), c.dtype(), out.data(), DType::f64, out.size());
  return out;
}

// |got - want| <= atol + rtol·|want| (or + rtol·bound[i] when a per-element bound is given).
inline void expect_near(const Tensor& got, const std::vector<double>& want, double atol,
                        double rtol, const std::vector<double>& bound = {}) {
  std::vector<double> g = doubles(got);
  ASSERT_EQ(g.size(), want.size());
  int bad = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    double scale = bound.empty() ? std::fabs(want[i]) : bound[i];
    double tol = atol + rtol * scale;
    if (!(std::fabs(g[i] - want[i]) <= tol) && ++bad <= 5)
      ADD_FAILURE() << "element " << i << ": got " << g[i] << ", want " << want[i] << " (tol "
                    << tol << ")";
  }
  EXPECT_EQ(bad, 0) << "elements out of tolerance";
}

using testing::expect_throw_with;

class OpTest : public ::testing::Test {
 protected:
  void SetUp() override { testing::init_cpu(); }
};

}  // namespace unillm::optest
