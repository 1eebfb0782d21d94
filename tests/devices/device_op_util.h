// The device × dtype op harness (ggml's test-backend-ops idea): an op runs on the CPU and on the
// reference plugin device in the dtype under test, and both are compared with the same op run in
// f64 on the CPU (the oracle), forward and every input gradient.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "core/registry.h"
#include "core/tensor.h"

namespace unillm::devtest {

Device ref_device();      // ref:0 (loads build/plugins once)
Device partial_device();  // ref_partial:0, the plugin without rms_norm's kernel
Tensor random(const Shape& s, uint64_t seed, DType dt = DType::f32);  // uniform in [-1, 1)
std::vector<double> host(const Tensor& t);  // values on the host, as doubles

using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;

struct Case {
  std::vector<Tensor> inputs;  // CPU tensors in the dtype under test (ints stay ints)
  bool grads = true;           // floating inputs require grad; gradients are compared too
  double tol = 1e-5;           // |x − oracle| <= tol · (1 + |oracle|), per element
  // Inputs the oracle keeps as they are (not cast to f64): e.g. an index tensor.
  std::vector<size_t> keep_dtype;
};

// Runs fn on three sides — the oracle (floating inputs cast to f64, CPU), the CPU and the
// reference device (inputs in their dtypes) — and checks that the CPU and the device match the
// oracle within c.tol, output and input gradients. The output gradient is a fixed random tensor.
// `what` names the case in failures.
void expect_matches_oracle(const std::string& what, const Case& c, const OpFn& fn);

// Sets the host-fallback policy (and report sink) while alive; restores warn with no sink however
// the scope is left (a failed ASSERT included), so later tests are not refused.
class FallbackPolicy {
 public:
  explicit FallbackPolicy(KernelRegistry::Fallback f,
                          std::function<void(const std::string&)> sink = nullptr) {
    kernel_registry().set_fallback(f, std::move(sink));
  }
  ~FallbackPolicy() { kernel_registry().set_fallback(KernelRegistry::Fallback::warn, nullptr); }
  FallbackPolicy(const FallbackPolicy&) = delete;
  FallbackPolicy& operator=(const FallbackPolicy&) = delete;
};

// The largest relative difference |a − b| / (1 + |b|) (for reporting).
double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace unillm::devtest
