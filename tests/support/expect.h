// Test helpers: closeness checks on tensors and paths to test data.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "core/tensor.h"

namespace unillm::testing {

// Max |a - b| over elements (any dtypes, CPU).
double max_abs_diff(const Tensor& a, const Tensor& b);
// Asserts shapes equal and |a - b| <= atol + rtol * |b| elementwise.
void expect_close(const Tensor& a, const Tensor& b, double atol, double rtol = 0.0);
// Path under the source tree, e.g. test_path("tests/data/llama2/tokenizer.model").
std::string source_path(const std::string& rel);
// Registers the CPU backend once (idempotent).
void init_cpu();
// The whole file (binary) as a string; "" when it cannot be read.
std::string slurp(const std::string& path);

// Expects fn() to throw E whose message contains `part`.
template <typename E, typename Fn>
void expect_throw_with(Fn&& fn, const std::string& part) {
  try {
    fn();
    ADD_FAILURE() << "expected an exception containing '" << part << "'";
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

}  // namespace unillm::testing
